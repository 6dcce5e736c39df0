package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/lockloss"
	"github.com/flashsale/seckill/loadtest/scrape"
	"github.com/flashsale/seckill/loadtest/verify"
)

func errBody(code string) string { return `{"error":{"code":"` + code + `","message":"m"}}` }

// TestJudge: a safe strategy fails on any problem or 5xx; naive fails when it did NOT oversell.
func TestJudge(t *testing.T) {
	safe := Row{Strategy: "hybrid", Outcomes: map[string]int{"ok": 5}}
	safe.Judge()
	assert.Empty(t, safe.Failed)
	broken := Row{Strategy: "hybrid", Outcomes: map[string]int{"ok": 5, attack.ServerError: 1}, Verdict: verify.Verdict{Problems: []string{"oversold by 1"}}}
	broken.Judge()
	assert.Len(t, broken.Failed, 2)
	blind := Row{Strategy: "naive", ExpectOversell: true, Outcomes: map[string]int{"ok": 5}}
	blind.Judge()
	assert.Contains(t, strings.Join(blind.Failed, ""), "did not oversell")
	caught := Row{Strategy: "naive", ExpectOversell: true, Outcomes: map[string]int{"ok": 9}, Verdict: verify.Verdict{Oversold: 4, Problems: []string{"oversold by 4"}}}
	caught.Judge()
	assert.Empty(t, caught.Failed)

	held := NewRow("unguarded-etcd", "unguarded-etcd", "lt-1", attack.Sale{}, lockloss.Name)
	require.True(t, held.ExpectOversell, "under the fault, the unguarded lock must be seen failing")
	held.Judge()
	assert.Contains(t, strings.Join(held.Failed, ""), "unguarded-etcd did not oversell under lock-loss", "the message names the strategy")
	free := NewRow("unguarded-etcd", "unguarded-etcd", "lt-1", attack.Sale{}, "")
	assert.False(t, free.ExpectOversell, "no fault: its lock holds, nothing to expect")
	free.Name = "unguarded-etcd"
	free.Judge()
	assert.Empty(t, free.Failed)
	assert.Equal(t, "invariant holds: no fault took its lock (-fault lock-loss does, and then it must oversell)", free.VerdictText(),
		"the verdict says what it judged, and why no oversell was asked for")
	assert.False(t, NewRow("etcd", "etcd", "lt-1", attack.Sale{}, lockloss.Name).ExpectOversell, "the guarded one keeps the invariant")
}

// TestQueuedVerdict: a queued row passes when every 202 ended, placed or rejected, and fails on
// a 202 that never ended — the planted one here, as the follower records it — even when the
// invariant holds; its orders/s is the rate its orders were placed, not accepted.
func TestQueuedVerdict(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	sale := func(unended bool) attack.Sale {
		var s attack.Sale
		s.Final = map[int]*vegeta.Result{}
		for i := range 4 {
			r := &vegeta.Result{Code: http.StatusAccepted, Timestamp: t0.Add(time.Duration(i) * 10 * time.Millisecond), Latency: 10 * time.Millisecond}
			s.Results, s.Final[i] = append(s.Results, r), r
			q := attack.Accepted{OrderID: fmt.Sprint("o", i), Accepted: r.End(), Ended: r.End().Add(time.Duration(i+1) * 100 * time.Millisecond), Status: "confirmed"}
			if i == 3 {
				q.Status, q.Reason = "rejected", attack.SoldOut
			}
			if i == 2 && unended {
				q.Ended, q.Status = time.Time{}, ""
			}
			s.Queued = append(s.Queued, q)
		}
		return s
	}
	ended := NewRow("queued", "queued", "lt-1", sale(false), "")
	require.NotNil(t, ended.Queue)
	assert.Equal(t, 4, ended.Outcomes[attack.Queued], "each 202 classified as queued")
	assert.Equal(t, 3, ended.orders(), "the placed 202s are the row's orders")
	assert.InDelta(t, 3/0.33, ended.OrdersPerSecond, 0.01, "three placed from the first request (0 ms) to the last placement (330 ms)")
	ended.Judge()
	assert.Empty(t, ended.Failed)

	planted := NewRow("queued", "queued", "lt-1", sale(true), "")
	planted.Judge()
	assert.Equal(t, []string{"1 of 4 accepted orders (202) never ended: still queued 10s after the sale"}, planted.Failed)
	assert.Nil(t, NewRow("hybrid", "hybrid", "lt-1", attack.Sale{}, "").Queue, "a sale without a 202 has no queue figures")
}

// TestQueueChart: a row answered 202 has its chart of accepted and placed units over time in
// report.html, a line each, counting its 202s and only those of them placed; a row without a
// 202 has none.
func TestQueueChart(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var s attack.Sale
	for i := range 4 {
		r := &vegeta.Result{Code: http.StatusAccepted, Timestamp: t0.Add(time.Duration(i) * 10 * time.Millisecond), Latency: 10 * time.Millisecond}
		s.Results = append(s.Results, r)
		q := attack.Accepted{OrderID: fmt.Sprint("o", i), Accepted: r.End(), Ended: r.End().Add(200 * time.Millisecond), Status: "confirmed"}
		if i == 1 {
			q.Status = "rejected"
		}
		s.Queued = append(s.Queued, q)
	}
	hybrid := attack.Sale{Results: []*vegeta.Result{{Code: http.StatusCreated, Timestamp: t0, Latency: time.Millisecond}}}
	reports := []Row{NewRow("queued", "queued", "lt-q", s, ""), NewRow("hybrid", "hybrid", "lt-h", hybrid, "")}
	_, perRow := charts(reports, map[string]attack.Sale{"queued": s, "hybrid": hybrid})
	var queue []chart
	for _, c := range perRow {
		if c.ID == "queue" {
			queue = append(queue, c)
		}
	}
	require.Len(t, queue, 1, "one queue chart, for the row answered 202")
	c := queue[0]
	assert.Equal(t, "queued", c.Row)
	order, colours := legendOf(string(c.Legend))
	assert.Equal(t, []string{"accepted, 202 (4)", "placed (3)"}, order, "the rejected 202 is not placed")
	_, marks := plotOf(string(c.Plot), colours)
	accepted, placed := marks[colours[order[0]]], marks[colours[order[1]]]
	require.Len(t, accepted.lines, 1)
	require.Len(t, placed.lines, 1)
	assert.Equal(t, 4, strings.Count(accepted.lines[0], "L"), "a vertex per accepted unit")
	assert.Equal(t, 3, strings.Count(placed.lines[0], "L"), "a vertex per placed unit")
}

// TestFaultBite: a guarded row under the fault passes only if the fault bit — the thief took a
// lock from a holder, the strategy locked (its lock wait count grew on /metrics), and its guard
// acted (its guard's counter or its lost locks grew) — or its invariant held trivially. The
// counts come from /metrics as the instances serve it, scraped before and after the sale.
func TestFaultBite(t *testing.T) {
	serve := func(text string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			assert.Equal(t, "/metrics", r.URL.Path)
			_, _ = io.WriteString(w, text)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	scrapeAll := func(text string) []scrape.Sample {
		s, err := scrape.Read(context.Background(), http.DefaultClient, serve(text))
		require.NoError(t, err)
		return []scrape.Sample{s}
	}
	metrics := func(hybridWaits, etcdWaits, retries, etcdFenced, lost int) string {
		return fmt.Sprintf(`# TYPE seckill_lock_wait_seconds histogram
seckill_lock_wait_seconds_bucket{strategy="hybrid",le="+Inf"} %[1]d
seckill_lock_wait_seconds_sum{strategy="hybrid"} 0.5
seckill_lock_wait_seconds_count{strategy="hybrid"} %[1]d
seckill_lock_wait_seconds_bucket{strategy="etcd",le="+Inf"} %[2]d
seckill_lock_wait_seconds_sum{strategy="etcd"} 0.5
seckill_lock_wait_seconds_count{strategy="etcd"} %[2]d
seckill_optimistic_retries_total{strategy="hybrid"} %[3]d
seckill_optimistic_retries_total{strategy="etcd"} 100
seckill_fenced_out_total{strategy="etcd"} %[4]d
seckill_lock_lost_total{strategy="hybrid"} %[5]d
seckill_lock_lost_total{strategy="unguarded-redis"} 100
`, hybridWaits, etcdWaits, retries, etcdFenced, lost)
	}
	before := scrapeAll(metrics(10, 10, 1, 0, 2))
	judged := func(strategy string, taken int, after []scrape.Sample, unread error) Row {
		r := NewRow(strategy, strategy, "lt-1", attack.Sale{}, lockloss.Name)
		r.Name, r.LocksTaken = strategy, &taken
		r.Bite = lockloss.NewBite(strategy, taken, before, after, unread)
		r.Judge()
		return r
	}

	bitten := judged("hybrid", 7, scrapeAll(metrics(50, 10, 4, 0, 4)), nil)
	assert.Empty(t, bitten.Failed)
	assert.Equal(t, "invariant holds under lock-loss (7 locks taken from a holder; 40 lock acquisitions, 3 optimistic retries, 2 locks lost)",
		bitten.VerdictText(), "the verdict shows the counts")
	fenced := judged("etcd", 7, scrapeAll(metrics(10, 30, 1, 5, 2)), nil)
	assert.Empty(t, fenced.Failed, "etcd's guard is its fence; hybrid's series are not etcd's")
	assert.Equal(t, "invariant holds under lock-loss (7 locks taken from a holder; 20 lock acquisitions, 5 writes fenced out, 0 locks lost)",
		fenced.VerdictText())

	for _, tc := range []struct {
		name     string
		strategy string
		taken    int
		after    []scrape.Sample
		unread   error
		why      string
	}{
		{"the thief found nothing to take", "hybrid", 0, scrapeAll(metrics(50, 10, 4, 0, 4)), nil,
			"the thief took no lock from a holder"},
		{"hybrid on the database path", "hybrid", 7, scrapeAll(metrics(10, 10, 4, 0, 2)), nil,
			`hybrid took no lock (seckill_lock_wait_seconds_count{strategy="hybrid"} did not grow)`},
		{"a guard that never acted", "etcd", 7, scrapeAll(metrics(50, 30, 9, 0, 9)), nil,
			`its guard never acted (neither seckill_fenced_out_total nor seckill_lock_lost_total{strategy="etcd"} grew)`},
		{"nothing at all", "hybrid", 0, before, nil,
			`the thief took no lock from a holder; hybrid took no lock (seckill_lock_wait_seconds_count{strategy="hybrid"} did not grow); ` +
				`its guard never acted (neither seckill_optimistic_retries_total nor seckill_lock_lost_total{strategy="hybrid"} grew)`},
		{"metrics unread", "hybrid", 7, nil, errors.New("metrics: connection refused"),
			"/metrics could not be read around the sale: metrics: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := judged(tc.strategy, tc.taken, tc.after, tc.unread)
			assert.Equal(t, []string{"the fault did not bite: " + tc.why}, r.Failed)
			assert.True(t, strings.HasPrefix(r.VerdictText(), "FAIL: the fault did not bite: "), r.VerdictText())
		})
	}
}

// TestJudgeAfterSoldOut: a problem that appears only after the sold-out phase fails the run, once.
func TestJudgeAfterSoldOut(t *testing.T) {
	r := Row{Strategy: "hybrid", Outcomes: map[string]int{attack.OK: 5}, Verdict: verify.Verdict{Problems: []string{"p1"}},
		Steady: &attack.Steady{Outcomes: map[string]int{attack.SoldOut: 10}, Verdict: &verify.Verdict{Problems: []string{"p1", "p2"}}}}
	r.Judge()
	assert.Equal(t, []string{"p1", "after the sold-out phase: p2"}, r.Failed)
	clean := Row{Strategy: "hybrid", Outcomes: map[string]int{attack.OK: 5},
		Steady: &attack.Steady{Outcomes: map[string]int{attack.SoldOut: 10, attack.Busy: 3, attack.Unavailable: 2}, TooMany: 3, Server: 2,
			Verdict: &verify.Verdict{}}}
	clean.Judge()
	assert.Empty(t, clean.Failed, "429 and 503 in the sold-out phase are reported, not failures")
	clean.Steady.Outcomes[attack.ServerError] = 1
	clean.Failed = nil
	clean.Judge()
	assert.Equal(t, []string{"1 requests answered 5xx in the sold-out phase"}, clean.Failed, "a 500 is never an answer")
}

// TestGoals: each row is judged against the targets of its own client count — 5x the baseline
// and hybrid at 0.8x pessimistic at both, sold-out at 0.8x bare and p99 at 50 ms at 64 clients,
// 0.7x and 200 ms at 512 — with its numbers, on the edge of each threshold and just past it; a
// count that is neither is judged against the nearest and says so.
func TestGoals(t *testing.T) {
	base := &Row{Strategy: "baseline", OrdersPerSecond: 1000}
	row := func(name string, clients int, ordersPerSecond, vsBare float64, p99 time.Duration, rssMB float64) Row {
		return Row{Strategy: name + " (batched 64)", Name: name, Clients: clients, OrdersPerSecond: ordersPerSecond,
			Selling: attack.Phase{Requests: 100, P99: p99}, PeakRSSMB: rssMB,
			Steady: &attack.Steady{Throughput: vsBare * 10000, Bare: &attack.Steady{Throughput: 10000}, VsBare: vsBare}}
	}
	ms := time.Millisecond
	all := func(met bool) map[int]bool {
		return map[int]bool{goalVsBaseline: met, goalHybridVsPessimistic: met, goalVsBare: met, goalP99: met, goalRSS: met}
	}
	for _, tc := range []struct {
		name        string
		r           Row
		pessimistic float64 // pessimistic's orders/s in the same pass
		stated      int     // the count of the targets it is judged against
		want        map[int]bool
	}{
		{"64 clients, every target just met", row("hybrid", 64, 5000, 0.8, 50*ms, 100), 6250, 64, all(true)},
		{"64 clients, every target just missed", row("hybrid", 64, 4990, 0.79, 51*ms, 101), 6250, 64, all(false)},
		{"512 clients, every target just met", row("hybrid", 512, 5000, 0.7, 200*ms, 100), 6250, 512, all(true)},
		{"512 clients, every target just missed", row("hybrid", 512, 4990, 0.69, 201*ms, 101), 6250, 512, all(false)},
		{"0.75x bare and 150 ms miss at 64", row("hybrid", 64, 6000, 0.75, 150*ms, 60), 6000, 64,
			map[int]bool{goalVsBaseline: true, goalHybridVsPessimistic: true, goalVsBare: false, goalP99: false, goalRSS: true}},
		{"and meet at 512", row("hybrid", 512, 6000, 0.75, 150*ms, 60), 6000, 512, all(true)},
		{"100 clients: the targets of 64", row("hybrid", 100, 6000, 0.75, 150*ms, 60), 6000, 64,
			map[int]bool{goalVsBaseline: true, goalHybridVsPessimistic: true, goalVsBare: false, goalP99: false, goalRSS: true}},
		{"400 clients: the targets of 512", row("hybrid", 400, 6000, 0.75, 150*ms, 60), 6000, 512, all(true)},
		{"etcd has no hybrid target", row("etcd", 64, 6000, 0.9, 10*ms, 60), 6000, 64,
			map[int]bool{goalVsBaseline: true, goalVsBare: true, goalP99: true, goalRSS: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass := []Row{tc.r, {Strategy: "pessimistic (batched 64)", Name: "pessimistic", Clients: tc.r.Clients, OrdersPerSecond: tc.pessimistic}}
			g := Goals(tc.r, pass, base)
			require.Len(t, g, len(tc.want))
			names := targetsAt(tc.stated).names()
			for i, met := range tc.want {
				j := slices.IndexFunc(g, func(x goal) bool { return x.Name == names[i] })
				require.GreaterOrEqual(t, j, 0, "%s is judged", names[i])
				require.NotNil(t, g[j].Met, names[i])
				assert.Equal(t, met, *g[j].Met, "%s: %s", names[i], g[j].text())
				assert.Equal(t, tc.stated, g[j].StatedAt)
			}
		})
	}

	good := Goals(row("hybrid", 512, 5000, 0.7, 200*ms, 80), []Row{{Name: "pessimistic", OrdersPerSecond: 6250}}, base)
	assert.Equal(t, []string{"yes: 5.00x (5000 vs 1000 orders/s)", "yes: 0.80x (5000 vs 6250 orders/s)", "yes: 0.70x (7000 vs 10000 req/s)",
		"yes: 200.0 ms", "yes: 80 MB"}, []string{good[0].text(), good[1].text(), good[2].text(), good[3].text(), good[4].text()})
	assert.Equal(t, []string{"orders/s >= 5x baseline", "hybrid >= 0.8x pessimistic", "sold-out req/s >= 0.7x bare", "selling p99 <= 200.0 ms",
		"peak RSS <= 100 MB", "202/s >= 0.8x sold-out req/s", "placed/s >= hybrid's orders/s", "202 to final p99 <= 3000.0 ms",
		"hybrid service CPU <= 1.2x pessimistic's", "reached >= 0.7 of ceiling, or its wait named"}, targetsAt(512).names())
	assert.Equal(t, "sold-out req/s >= 0.8x bare", targetsAt(64).names()[goalVsBare])
	assert.Equal(t, "selling p99 <= 50.0 ms", targetsAt(64).names()[goalP99])
	assert.Equal(t, 64, targetsAt(288).Clients, "a tie goes to the stricter, lower count")
	assert.Equal(t, "at 100 clients, judged against those stated at 64, the nearest stated count", targetsAt(100).statedText(100))
	assert.Equal(t, "at 512 clients", targetsAt(512).statedText(512))

	since := Goals(Row{Strategy: "etcd", Name: "etcd", Clients: 64, PeakRSSMB: 101, PeakRSSSinceStart: true}, nil, base)
	assert.Contains(t, since[len(since)-1].Detail, "since the process started")
	for _, x := range Goals(Row{Strategy: "hybrid", Name: "hybrid", Clients: 64}, nil, nil) {
		assert.Nil(t, x.Met, "%s: nothing was measured", x.Name)
		assert.True(t, strings.HasPrefix(x.text(), "n/a: "), x.text())
	}
	hybrid := row("hybrid", 64, 5000, 0.8, 50*ms, 100)
	assert.Equal(t, "n/a: no pessimistic row in this pass (it needs -compare)", Goals(hybrid, []Row{hybrid}, base)[goalHybridVsPessimistic].text())
	assert.Equal(t, "n/a: pessimistic sold nothing in this pass",
		Goals(hybrid, []Row{{Name: "pessimistic", Skipped: "refused"}}, base)[goalHybridVsPessimistic].text())
	skipped := Goals(Row{Strategy: "etcd", Name: "etcd", Steady: &attack.Steady{Skipped: "the sale did not sell out"}}, nil, base)
	assert.Equal(t, "n/a: the sale did not sell out", skipped[1].text())
	assert.Nil(t, Goals(*base, nil, base))
	assert.Nil(t, Goals(Row{Strategy: BareRow, Steady: &attack.Steady{Throughput: 1}}, nil, base))
	assert.Nil(t, Goals(Row{Strategy: "naive", Name: "naive", ExpectOversell: true}, nil, base))

	// A queued row: its 202s against its own sold-out answers, placed/s against hybrid in the
	// pass, and the time from 202 to the final state, at the thresholds of its count.
	for _, tc := range []struct {
		clients          int
		accepted, placed float64
		p99              time.Duration
		hybrid           float64
		want             []string
	}{
		{64, 8000, 2000, time.Second, 2000, []string{"yes: 0.80x (8000 vs 10000 req/s)", "yes: 1.00x (2000 vs 2000 orders/s)", "yes: 1000.0 ms"}},
		{64, 7990, 1990, 1001 * ms, 2000, []string{"NO: 0.80x (7990 vs 10000 req/s)", "NO: 0.99x (1990 vs 2000 orders/s)", "NO: 1001.0 ms"}},
		{512, 2700, 1370, 3 * time.Second, 3900, []string{"NO: 0.27x (2700 vs 10000 req/s)", "NO: 0.35x (1370 vs 3900 orders/s)", "yes: 3000.0 ms"}},
		{512, 8000, 4000, 3001 * ms, 0, []string{"yes: 0.80x (8000 vs 10000 req/s)", "n/a: hybrid sold nothing in this pass", "NO: 3001.0 ms"}},
	} {
		q := row("queued", tc.clients, tc.placed, 0.9, 10*ms, 60)
		q.Steady.Throughput = 10000
		q.Queue = &attack.Queue{AcceptedPerSecond: tc.accepted, PlacedPerSecond: tc.placed, EndP99: tc.p99}
		g := Goals(q, []Row{q, {Name: "hybrid", OrdersPerSecond: tc.hybrid}}, base)
		var got []string
		for _, x := range g[len(g)-3:] {
			got = append(got, x.text())
		}
		assert.Equal(t, tc.want, got, "%d clients", tc.clients)
		assert.Equal(t, targetsAt(tc.clients).names()[goalQueuedEndP99], g[len(g)-1].Name)
	}
	q := row("queued", 64, 1000, 0.9, 10*ms, 60)
	q.Queue = &attack.Queue{AcceptedPerSecond: 1000, PlacedPerSecond: 1000}
	assert.Equal(t, "n/a: no hybrid row in this pass (it needs -compare)", Goals(q, []Row{q}, base)[len(Goals(q, []Row{q}, base))-2].text())
	assert.Len(t, Goals(row("hybrid", 64, 1000, 0.9, 10*ms, 60), nil, base), 5, "a row without a 202 has no queue targets")

	// hybrid's service CPU per order against pessimistic's in the pass, and every row with its
	// CPU measured against its ceiling: near it, or below it with its wait named.
	withCPU := func(r Row, service float64) Row {
		r.CPU = &cpu.Cost{Selling: &cpu.Phase{Groups: []cpu.GroupCost{{Group: cpu.Service, SecondsPer1000: &service}}}}
		return r
	}
	pess := withCPU(Row{Name: "pessimistic", OrdersPerSecond: 5000}, 0.100)
	last := func(g []goal) string { return g[len(g)-1].text() }
	assert.Equal(t, "yes: 1.20x (0.120 vs 0.100 s per 1000 orders)", last(Goals(withCPU(hybrid, 0.120), []Row{pess}, base)))
	assert.Equal(t, "NO: 1.25x (0.125 vs 0.100 s per 1000 orders)", last(Goals(withCPU(hybrid, 0.125), []Row{pess}, base)))
	assert.Equal(t, "n/a: the service's CPU not measured in both rows", last(Goals(withCPU(hybrid, 0.120), []Row{{Name: "pessimistic", OrdersPerSecond: 5000}}, base)))
	assert.Len(t, Goals(hybrid, []Row{pess}, base), 5, "a hybrid row without its CPU measured is not judged on it")
	ceiling := func(reached float64, waits string) string {
		r := row("etcd", 64, 5000, 0.9, 10*ms, 60)
		r.Ceiling = &Ceiling{Reached: reached, OrdersPerSecond: 5000 / reached, WaitsOn: waits}
		return last(Goals(r, nil, base))
	}
	assert.Equal(t, "yes: 0.70 of 7143 orders/s", ceiling(0.7, "the cores: it gains only by costing less"))
	assert.Equal(t, "yes: 0.50 of 10000 orders/s, its wait named", ceiling(0.5, "the lock hand-off: ..."))
	assert.Equal(t, "NO: 0.50 of 10000 orders/s, its wait unknown", ceiling(0.5, "unknown"))
}

// TestTablesByCount: a run at two client counts reports each count's tables apart, each
// targets table with the thresholds of its count, and only the columns some row was judged on.
func TestTablesByCount(t *testing.T) {
	var reports []Row
	for _, c := range []int{64, 512} {
		base := Row{Strategy: "baseline", Clients: c, OrdersPerSecond: 1000}
		etcd := Row{Strategy: "etcd", Name: "etcd", Clients: c, OrdersPerSecond: 6000, Outcomes: map[string]int{attack.OK: 10},
			Selling: attack.Phase{Requests: 10, P99: 100 * time.Millisecond}}
		etcd.Goals = Goals(etcd, nil, &base)
		reports = append(reports, base, etcd)
	}
	var out strings.Builder
	Markdown(&out, reports)
	text := out.String()
	at64, at512, ok := strings.Cut(text, "At 512 clients:")
	require.True(t, ok, text)
	assert.Contains(t, at64, "At 64 clients:")
	assert.Contains(t, at64, "| `etcd` | yes: 6.00x (6000 vs 1000 orders/s) | n/a: no sold-out phase | NO: 100.0 ms |")
	assert.Contains(t, at512, "| `etcd` | yes: 6.00x (6000 vs 1000 orders/s) | n/a: no sold-out phase | yes: 100.0 ms |")
	assert.Contains(t, at512, "sold-out req/s >= 0.7x bare")
	assert.NotContains(t, text, "hybrid >= ", "no hybrid row: no column for it")
	assert.Equal(t, 2, strings.Count(text, "| strategy | lock |"), "a comparison table per count")
}

func TestFileName(t *testing.T) {
	assert.Equal(t, "hybrid-batched-64", fileName("hybrid (batched 64)"))
	assert.Equal(t, "hybrid-per-order", fileName("hybrid (per-order)"))
	assert.Equal(t, "pessimistic", fileName("pessimistic"))
}

// TestCPUTables: one row per measured row, a column per group, n/a where a group was not
// measured with the reason once in the intro, and the sum of the measured groups.
func TestCPUTables(t *testing.T) {
	one, two := 1.0, 2.0
	per := func(v float64) *float64 { v = 1000 * v / 500; return &v }
	cost := &cpu.Phase{Count: 500, WallSeconds: 2, Groups: []cpu.GroupCost{
		{Group: cpu.Service, Seconds: &one, SecondsPer1000: per(one)},
		{Group: cpu.Database, Seconds: &two, SecondsPer1000: per(two)},
		{Group: cpu.Redis, NA: "embedded (miniredis) in the first service instance: counted there"},
	}}
	ts := cpuTables(Combine([][]Row{{{Strategy: "hybrid (batched 64)", CPU: &cpu.Cost{Selling: cost}, Ceiling: NewCeiling(250, cost, 2)}, {Strategy: "etcd (batched 64)"}}}))
	require.Len(t, ts, 1, "no row had a sold-out phase")
	assert.Equal(t, []string{"row", "orders", "seconds", cpu.Service, cpu.Database, cpu.Redis, "all groups", "cores busy", "ceiling orders/s", "reached", "waits on"}, ts[0].Head)
	assert.Equal(t, [][]string{{"hybrid (batched 64)", "500", "2.00", "2.000", "4.000", "n/a", "6.000 (measured groups)", "1.50",
		"333", "0.75", "the cores: it gains only by costing less"}}, ts[0].Rows, "2 cores over 6 ms of CPU per order: 333 orders/s, of which 250 is 0.75")
	assert.Contains(t, ts[0].Intro, "the 2 cores over all groups' CPU per order")
	assert.Contains(t, ts[0].Intro, "n/a: Redis: embedded (miniredis) in the first service instance: counted there.")
}

// TestCheckoutTable: a checkout row stands beside the single orders of its strategy, pass and
// client count, with the ratio its target is stated in; it is judged by no single-order target.
func TestCheckoutTable(t *testing.T) {
	single := Row{Strategy: "hybrid", Name: "hybrid", Clients: 64, OrdersPerSecond: 2000, Outcomes: map[string]int{attack.OK: 100}}
	checkout := Row{Strategy: "hybrid, 2-line checkout", Name: "hybrid", Clients: 64, CheckoutLines: 2, OrdersPerSecond: 500,
		Outcomes: map[string]int{attack.OK: 100}}
	assert.Nil(t, Goals(checkout, []Row{single, checkout}, nil))
	var out strings.Builder
	Markdown(&out, []Row{single, checkout})
	assert.Contains(t, out.String(), "| `hybrid, 2-line checkout` | 2 | 100 | 500 | 2000 | 0.25x | invariant holds |")
	out.Reset()
	Markdown(&out, []Row{single})
	assert.NotContains(t, out.String(), "Checkouts:", "no checkout sold: no table")
}
