package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/scrape"
)

// testProvenance is a provenance line as the tool writes it.
const testProvenance = "Measured by `go run ./loadtest -rounds 3` at commit 1d1dcfa on 2 cores, MariaDB 10.11.19, Redis 7.0.15, 2026-12-01."

// phase is a selling phase's CPU: count orders over wall seconds, each group's CPU seconds in
// order (NaN-free; a negative one is a group not measured).
func phase(count int, wall float64, groups map[string]float64) *cpu.Phase {
	p := &cpu.Phase{Count: count, WallSeconds: wall}
	for _, name := range []string{"service instances", "database", "load generator"} {
		s, ok := groups[name]
		g := cpu.GroupCost{Group: name}
		if !ok {
			g.NA = "not on this machine"
		} else {
			per := 1000 * s / float64(count)
			g.Seconds, g.SecondsPer1000 = &s, &per
		}
		p.Groups = append(p.Groups, g)
	}
	return p
}

// sold is a measured round of a row: its orders/s, selling p99, sold-out req/s beside a bare
// handler's, and the service's CPU seconds over 1000 orders (the database 0.2 s, the load
// generator 0.3 s).
func sold(name string, ordersPerSecond float64, p99 time.Duration, soldOut, bare, service float64) Row {
	r := Row{Strategy: name, Name: name, Clients: 64, OrdersPerSecond: ordersPerSecond, Outcomes: map[string]int{attack.OK: 1000},
		Requests: 4000, Attempts: 4000, Selling: attack.Phase{Requests: 1500, P50: p99 / 4, P99: p99},
		Steady: &attack.Steady{Throughput: soldOut, VsBare: soldOut / bare, Bare: &attack.Steady{Throughput: bare}},
		CPU:    &cpu.Cost{Selling: phase(1000, 1000/ordersPerSecond, map[string]float64{"service instances": service, "database": 0.2, "load generator": 0.3})}}
	r.Ceiling = NewCeiling(r.OrdersPerSecond, r.CPU.Selling, 2)
	return r
}

// TestCombineMedians: three rounds of two rows, in the order they ran, make one row each with
// the median of every figure and its min–max — not the mean, not the first or last round — the
// other cells of the median round, every round kept, and a failure of any round failing the row.
func TestCombineMedians(t *testing.T) {
	rounds := [][]Row{
		{sold("hybrid", 1000, 30*time.Millisecond, 8000, 10000, 0.9), sold("pessimistic", 2000, 10*time.Millisecond, 9000, 10000, 0.4)},
		{sold("hybrid", 1600, 20*time.Millisecond, 9000, 10000, 0.5), sold("pessimistic", 1000, 40*time.Millisecond, 6000, 12000, 0.6)},
		{sold("hybrid", 1200, 90*time.Millisecond, 7000, 7000, 0.7), sold("pessimistic", 2500, 20*time.Millisecond, 9500, 9500, 0.5)},
	}
	rounds[2][1].Failed = []string{"oversold by 1"}
	rows := Combine(rounds)
	require.Len(t, rows, 2)
	h, p := rows[0], rows[1]
	assert.Equal(t, []string{"hybrid", "pessimistic"}, []string{h.Strategy, p.Strategy}, "the order the rows ran in")
	assert.Len(t, h.Rounds, 3)

	assert.Equal(t, 1200.0, h.OrdersPerSecond, "the middle one of 1000, 1600 and 1200, not their mean (1267)")
	assert.Equal(t, Range{Min: 1000, Max: 1600}, h.Spread[figOrdersPerSecond])
	assert.Equal(t, 3, h.Round, "its other cells are of the round it sold 1200 orders/s in")
	assert.Equal(t, 30*time.Millisecond, h.Selling.P99, "p99 of 20, 30, 90 ms: the median, not the mean (46.7) nor the median round's (90)")
	assert.Equal(t, Range{Min: 20, Max: 90}, h.Spread[figSellingP99])
	assert.Equal(t, 8000.0, h.Steady.Throughput)
	assert.InDelta(t, 0.9, h.Steady.VsBare, 1e-9, "the median of the ratios taken round by round (0.8, 0.9, 1.0), not the ratio of the medians (0.8)")
	assert.Equal(t, 10000.0, h.Steady.Bare.Throughput)
	service := h.CPU.Selling.Groups[0]
	require.NotNil(t, service.SecondsPer1000)
	assert.InDelta(t, 0.7, *service.SecondsPer1000, 1e-9, "the service's CPU per 1000 orders: 0.5, 0.7, 0.9")
	assert.InDelta(t, 1.2, 1000*h.Ceiling.SecondsPerOrder, 1e-9, "all groups: 1.0, 1.2, 1.4")
	assert.InDelta(t, 2/0.0012, h.Ceiling.OrdersPerSecond, 1e-6)

	assert.Equal(t, 2000.0, p.OrdersPerSecond)
	assert.Equal(t, 1, p.Round)
	assert.Equal(t, []string{"round 3: oversold by 1"}, p.Failed, "a round that failed fails its row, saying which")
	assert.Contains(t, p.VerdictText(), "FAIL")

	var md strings.Builder
	Markdown(&md, rows)
	assert.Contains(t, md.String(), "| 1200 (1000–1600) |", "orders/s: the median with its min–max")
	assert.Contains(t, md.String(), "| 7.5 (5.0–22.5) / 30.0 (20.0–90.0) |", "p50 / p99 while selling")
	assert.Contains(t, md.String(), "| 8000 (7000–9000) | 0.90x (0.80x–1.00x) |", "sold-out req/s and vs bare")
	assert.Contains(t, md.String(), "| 0.700 (0.500–0.900) | 0.200 (0.200–0.200) | 0.300 (0.300–0.300) | 1.200 (1.000–1.400) |",
		"the CPU per 1000 orders of each group, and of all: the median of the rounds' sums")
	assert.Contains(t, md.String(), "Each row ran 3 times, interleaved")

	one := Combine(rounds[:1])
	assert.Equal(t, rounds[0][0].OrdersPerSecond, one[0].OrdersPerSecond)
	assert.Empty(t, one[0].Spread, "one round: no spread")
	assert.Zero(t, one[0].Round)
	var single strings.Builder
	Markdown(&single, one)
	assert.NotContains(t, single.String(), "–", "one round: plain figures, as before rounds")
}

// TestCeiling: the ceiling is the cores over all groups' CPU per order, and the share reached
// the orders/s over it; a group not measured makes it a bound, and says so.
// TestCombineQueueMedians: a queued row's accepted/s and its times from 202 to the final state
// are the medians of its rounds, with their min–max, and its placed/s is its orders/s.
func TestCombineQueueMedians(t *testing.T) {
	var rounds [][]Row
	for _, f := range []struct {
		placed, accepted float64
		p50, p99         time.Duration
	}{{1300, 2900, 400 * time.Millisecond, 4 * time.Second}, {1100, 2500, 300 * time.Millisecond, 5 * time.Second}, {1200, 2700, 900 * time.Millisecond, 2 * time.Second}} {
		r := sold("queued", f.placed, 50*time.Millisecond, 9000, 10000, 0.5)
		r.Queue = &attack.Queue{Accepted: 1000, Placed: 1000, AcceptedPerSecond: f.accepted, PlacedPerSecond: f.placed, EndP50: f.p50, EndP99: f.p99}
		rounds = append(rounds, []Row{r})
	}
	q := Combine(rounds)[0]
	require.NotNil(t, q.Queue)
	assert.Equal(t, 1200.0, q.Queue.PlacedPerSecond)
	assert.Equal(t, 2700.0, q.Queue.AcceptedPerSecond)
	assert.Equal(t, 400*time.Millisecond, q.Queue.EndP50)
	assert.Equal(t, 4*time.Second, q.Queue.EndP99, "the median of 4, 5 and 2 s, not the median round's (2 s)")
	table, ok := queueTable([]Row{q})
	require.True(t, ok)
	assert.Equal(t, []string{"queued", "1000", "2700 (2500–2900)", "1000", "1200 (1100–1300)", "0", "400.0 (300.0–900.0) / 4000.0 (2000.0–5000.0)", "0"}, table.Rows[0])
}

func TestCeiling(t *testing.T) {
	p := phase(2000, 4, map[string]float64{"service instances": 1.0, "database": 0.6, "load generator": 0.4})
	c := NewCeiling(500, p, 2)
	require.NotNil(t, c)
	assert.InDelta(t, 0.001, c.SecondsPerOrder, 1e-12, "2 CPU seconds over 2000 orders")
	assert.InDelta(t, 2000, c.OrdersPerSecond, 1e-9, "2 cores over 1 ms of CPU per order")
	assert.InDelta(t, 0.25, c.Reached, 1e-12, "500 of 2000 orders/s")
	assert.True(t, c.AllGroups)
	// cores busy is the same share seen from the other side: 2 CPU seconds over 4 s of wall on 2 cores.
	seconds, _ := p.Total()
	assert.InDelta(t, seconds/p.WallSeconds/2, c.Reached, 1e-12)

	partial := NewCeiling(500, phase(2000, 4, map[string]float64{"service instances": 1.0}), 4)
	assert.False(t, partial.AllGroups)
	assert.InDelta(t, 8000, partial.OrdersPerSecond, 1e-9, "4 cores over the measured 0.5 ms")
	assert.Nil(t, NewCeiling(500, nil, 2), "no CPU measured: no ceiling")
	assert.Nil(t, NewCeiling(0, &cpu.Phase{}, 2), "nothing sold: no ceiling")
}

// TestWaitsOn: a row near its ceiling is CPU-bound; one far below it is said to wait on what
// the tool measured — retried busy answers, a lock held nearly all the window, a lock handed
// off slowly — and on nothing it did not: unknown.
func TestWaitsOn(t *testing.T) {
	row := func(reached float64, attempts int, locks *scrape.LockTimes) Row {
		return Row{Requests: 100, Attempts: attempts, Locks: locks, Ceiling: &Ceiling{Reached: reached},
			CPU: &cpu.Cost{Selling: &cpu.Phase{Count: 100, WallSeconds: 2}}}
	}
	held := func(count int, hold, wait time.Duration) *scrape.LockTimes {
		return &scrape.LockTimes{Hold: scrape.LockTime{Count: count, Mean: hold}, Wait: scrape.LockTime{Count: count, Mean: wait}}
	}
	assert.Equal(t, "the cores: it gains only by costing less", waitsOn(row(0.7, 100, nil)))
	assert.Contains(t, waitsOn(row(0.3, 130, nil)), "Retry-After: 30 busy answers were retried")
	assert.Equal(t, "the lock: held 90% of the selling window (100 holds of 18.0 ms on average), one holder at a time",
		waitsOn(row(0.3, 100, held(100, 18*time.Millisecond, 50*time.Millisecond))))
	assert.Equal(t, "the lock hand-off: the lock was held 25% of the selling window, while acquisitions waited 20.0 ms on average for holds of 5.0 ms",
		waitsOn(row(0.3, 100, held(100, 5*time.Millisecond, 20*time.Millisecond))))
	assert.Equal(t, "unknown: the lock's holds (100 of 30.0 ms on average) add up to more than the selling window, so its histograms do not isolate it",
		waitsOn(row(0.3, 100, held(100, 30*time.Millisecond, 50*time.Millisecond))), "3 s of holds in a 2 s window: more than the selling phase")
	assert.Equal(t, "unknown", waitsOn(row(0.3, 100, held(100, 5*time.Millisecond, 1*time.Millisecond))), "a lock idle and not waited on")
	assert.Equal(t, "unknown", waitsOn(row(0.3, 100, held(0, 0, 30*time.Millisecond))), "a row lock: its hold is timed inside its wait")
	assert.Equal(t, "unknown", waitsOn(row(0.3, 100, nil)), "no lock measured")
	queued := func(accepted, placed float64) Row {
		r := row(0.3, 100, nil)
		r.Queue = &attack.Queue{AcceptedPerSecond: accepted, PlacedPerSecond: placed}
		return r
	}
	assert.Equal(t, "its writers: they placed 1200 orders/s while admission accepted 2800/s, so the queue grew while the sale lasted and the sale ended when they had drained it",
		waitsOn(queued(2800, 1200)))
	assert.Equal(t, "unknown", waitsOn(queued(1300, 1200)), "writers keeping up with the 202s: not what it waits on")
	assert.Empty(t, waitsOn(Row{}), "no ceiling, nothing to say")
}

// TestProvenanceHeadsTheReport: report.md starts with the provenance line, then the run's
// description, so that a table pasted with the lines above it carries where it came from.
func TestProvenanceHeadsTheReport(t *testing.T) {
	dir := t.TempDir()
	rows := Combine([][]Row{{sold("hybrid", 1000, 30*time.Millisecond, 8000, 10000, 0.9)}})
	require.NoError(t, Write(dir, testProvenance, "A run.", rows, nil))
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(md), "# seckill load test\n\n"+testProvenance+"\n\nA run.\n\n"), "%s", md)
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), "<p>Measured by `go run ./loadtest -rounds 3` at commit 1d1dcfa")
}
