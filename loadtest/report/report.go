// Package report is the load tool's report: a row per sale (Row), measured and judged — the
// invariant, the fault's bite, the performance targets of its client count (Goals) — and
// written as Markdown on stdout and in report.md, as report.html with its inline SVG charts (drawn
// by gonum/plot), and as JSON.
package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/lockloss"
	"github.com/flashsale/seckill/loadtest/scrape"
	"github.com/flashsale/seckill/loadtest/verify"
)

// families are the lock families of the classic comparison, by strategy.
var families = map[string]string{
	"hybrid":      "Redis lock + admission, DB version check",
	"etcd":        "etcd lease + fencing token",
	"zookeeper":   "ZooKeeper ephemeral sequential node + fencing token (zxid)",
	"pessimistic": "DB row lock (FOR UPDATE NOWAIT, retried within the wait)",
	"dblock":      "DB lock table",
	"queued":      "Redis admission, JetStream queue, batched DB version check",
	"naive":       "none (unsafe on purpose)",

	"unguarded-redis":     "Redis lock alone, no version check (unsafe on purpose)",
	"unguarded-etcd":      "etcd lease alone, no fencing token (unsafe on purpose)",
	"unguarded-zookeeper": "ZooKeeper node alone, no fencing token (unsafe on purpose)",
}

// BareRow names the bare handler's row in the report.
const BareRow = "bare handler"

// Lifecycle is what the buyers did after the sale, and how the units came back.
type Lifecycle struct {
	Cancelled  int           `json:"cancelled"`   // orders the buyers cancelled
	Unpaid     int           `json:"unpaid"`      // orders left to expire
	Paid       int           `json:"paid"`        // orders paid
	ReturnedIn time.Duration `json:"returned_in"` // from the end of the payments until no order was pending
	Resold     int           `json:"resold"`      // orders of the second round, on the returned units
	Problems   []string      `json:"problems,omitempty"`
}

// Row is one strategy's sale, measured and verified: a row of the comparison.
type Row struct {
	Strategy          string            `json:"strategy"` // the row's name: the strategy, and the group commit of its pass
	Family            string            `json:"family"`
	Name              string            `json:"strategy_name,omitempty"` // the strategy alone ("" for the references: the baseline, the bare handler)
	Pass              string            `json:"pass,omitempty"`          // the label of the row's pass: its group commit, and its client count when the run has several
	Clients           int               `json:"clients,omitempty"`       // the client count of the row (-concurrency)
	SKU               string            `json:"sku"`
	Requests          int               `json:"requests"`
	Attempts          int               `json:"attempts"`
	Outcomes          map[string]int    `json:"outcomes"`
	BusyAnswers       int               `json:"busy_answers"`
	LocksLost         *int              `json:"locks_lost,omitempty"` // by live holders across the instances (seckill_lock_lost_total), over this row's phases
	Locks             *scrape.LockTimes `json:"lock_times,omitempty"` // the lock wait and hold histograms across the instances, over this row's phases
	OrdersPerSecond   float64           `json:"orders_per_second"`
	VsBaseline        float64           `json:"vs_baseline,omitempty"` // orders/s over the baseline's, same run
	Selling           attack.Phase      `json:"selling"`
	SoldOut           attack.Phase      `json:"sold_out"` // the tail of the sale's own requests, after the last 201
	Steady            *attack.Steady    `json:"sold_out_steady,omitempty"`
	Lifecycle         *Lifecycle        `json:"after_sale,omitempty"`           // -cancel, -unpaid
	Queue             *attack.Queue     `json:"queue,omitempty"`                // a sale answered 202 (the queued strategy): accepted, placed, the time to the final state
	PeakRSSMB         float64           `json:"peak_rss_mb,omitempty"`          // the highest instance's, over this row's phases
	PeakRSSSinceStart bool              `json:"peak_rss_since_start,omitempty"` // the peak could not be reset before the row
	Goals             []goal            `json:"targets,omitempty"`
	CPU               *cpu.Cost         `json:"cpu,omitempty"`     // CPU seconds per process group in the selling and the sold-out phase
	Ceiling           *Ceiling          `json:"ceiling,omitempty"` // the CPU-bound ceiling of the selling phase, and how close the row came to it
	Round             int               `json:"round,omitempty"`   // the round the row ran in; of a row of several rounds, its median round by orders/s, whose cells are not medians
	Spread            map[string]Range  `json:"spread,omitempty"`  // of a row of several rounds: the min–max of each median figure
	Rounds            []Row             `json:"rounds,omitempty"`  // of a row of several rounds: each round's row, as measured and judged
	Verdict           verify.Verdict    `json:"verdict"`
	Fault             string            `json:"fault,omitempty"`          // the fault that ran on this sale's lock while it sold (-fault)
	LocksTaken        *int              `json:"locks_taken,omitempty"`    // by the fault, from their holders
	Bite              *lockloss.Bite    `json:"fault_bite,omitempty"`     // a guarded strategy under the fault: what the fault did to it
	CheckoutLines     int               `json:"checkout_lines,omitempty"` // a sale of checkouts of this many products, one unit each: its orders are checkouts
	ExpectOversell    bool              `json:"expect_oversell"`
	Skipped           string            `json:"skipped,omitempty"`
	Failed            []string          `json:"failed,omitempty"` // why this run fails the tool
}

// NewRow measures a sale of strategy, reported as row; fault is the fault that ran on its lock
// ("": none). The verdict is added by the caller.
func NewRow(row, strategy, sku string, s attack.Sale, fault string) Row {
	r := Row{Strategy: row, Family: families[strategy], SKU: sku, Requests: len(s.Final), Attempts: len(s.Results),
		Outcomes: map[string]int{}, Fault: fault, ExpectOversell: lockloss.MustOversell(strategy, fault)}
	if r.Family == "" {
		r.Family = "server default"
	}
	for _, res := range s.Final {
		r.Outcomes[attack.Classify(res)]++
	}
	for _, res := range s.Results {
		if attack.Classify(res) == attack.Busy {
			r.BusyAnswers++
		}
	}
	selling, soldOut := attack.Split(s.Results)
	r.Selling, r.SoldOut = attack.NewPhase(selling), attack.NewPhase(soldOut)
	r.OrdersPerSecond = attack.OrdersPerSecond(selling)
	if r.Queue = attack.NewQueue(s.Results, s.Queued); r.Queue != nil {
		// A 202 is a promise, not an order: the row's orders/s is the rate its orders were placed.
		r.OrdersPerSecond = r.Queue.PlacedPerSecond
	}
	return r
}

// Judge decides whether the run passes: a safe strategy must keep the invariant, never answer
// 5xx but 503 while selling or once sold out, and never answer 201 once sold out (that unit does not exist), and the
// invariant must still hold after the sold-out phase; an unsafe one (naive; an unguarded one
// under a fault that took its lock) must be caught overselling, or the checks are blind. An
// unguarded one with no fault is judged as a safe one: its lock alone holds (mustOversell). A
// guarded one under the fault must also show that the fault bit — its lock taken, its guard at
// work — or its invariant held trivially and proves nothing of the guard.
func (r *Row) Judge() {
	if r.Skipped != "" {
		return
	}
	if n := r.Outcomes[attack.ServerError]; n > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d requests answered 5xx", n))
	}
	if r.ExpectOversell {
		switch {
		case r.Verdict.Oversold > 0:
		case r.Fault != "":
			r.Failed = append(r.Failed, fmt.Sprintf("%s did not oversell%s: the fault did not put two holders in the section, or the checks are blind",
				r.Strategy, r.faultText()))
		default:
			r.Failed = append(r.Failed, r.Strategy+" did not oversell: the load did not race, or the checks are blind")
		}
		return
	}
	if r.Bite != nil {
		if why := r.Bite.Missed(r.Name); why != "" {
			r.Failed = append(r.Failed, fmt.Sprintf("the fault did not bite: %s", why))
		}
	}
	r.Failed = append(r.Failed, r.Verdict.Problems...)
	if r.Queue != nil && r.Queue.Unended > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d of %d accepted orders (202) never ended: still queued %s after the sale",
			r.Queue.Unended, r.Queue.Accepted, attack.EndWithin))
	}
	if r.Lifecycle != nil {
		r.Failed = append(r.Failed, r.Lifecycle.Problems...)
	}
	if r.Steady == nil {
		return
	}
	if n := r.Steady.Outcomes[attack.OK]; n > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d orders answered 201 in the sold-out phase: oversold", n))
	}
	if n := r.Steady.Outcomes[attack.Queued]; n > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d orders accepted (202) in the sold-out phase: admitted past the stock", n))
	}
	if n := r.Steady.Outcomes[attack.ServerError]; n > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d requests answered 5xx in the sold-out phase", n))
	}
	if r.Steady.Verdict != nil {
		for _, p := range r.Steady.Verdict.Problems {
			if !slices.Contains(r.Verdict.Problems, p) {
				r.Failed = append(r.Failed, "after the sold-out phase: "+p)
			}
		}
	}
}

func (r Row) VerdictText() string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case len(r.Failed) > 0:
		return "FAIL: " + strings.Join(r.Failed, "; ")
	case r.ExpectOversell:
		return fmt.Sprintf("oversold by %d%s, caught as expected", r.Verdict.Oversold, r.faultText())
	case r.Fault == "" && lockloss.Unguarded(r.Name):
		return "invariant holds: no fault took its lock (-fault lock-loss does, and then it must oversell)"
	}
	return "invariant holds" + r.faultText()
}

// faultText says which fault ran on the row's lock, how many locks it took, and, on a guarded
// row, what it did to the strategy.
func (r Row) faultText() string {
	if r.Fault == "" {
		return ""
	}
	if r.Bite != nil {
		return fmt.Sprintf(" under %s (%s)", r.Fault, r.Bite)
	}
	if r.LocksTaken == nil {
		return " under " + r.Fault
	}
	return fmt.Sprintf(" under %s (%d locks taken)", r.Fault, *r.LocksTaken)
}

// Milliseconds is a duration in milliseconds with one decimal, the unit of every latency in the report.
func Milliseconds(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

// table is one table of the report, rendered as Markdown on stdout and in report.md, and as
// HTML in report.html, from the same cells.
type table struct {
	Intro string
	Head  []string
	Rows  [][]string
}

// tables are the report's tables: the comparison, then, when the run measured them, the steady
// sold-out phase beside the bare handler, the performance targets and the CPU cost per order.
func tables(reports []Row) []table {
	if counts := clientCounts(reports); len(counts) > 1 {
		return tablesByCount(reports, counts)
	}
	comparison := table{Head: []string{"strategy", "lock", "orders", "orders/s (selling)", "vs baseline", "p50 / p99 ms (selling)",
		"busy answers", "locks lost", "tail sold-out req/s", "tail sold-out p99 ms", "peak RSS MB", "oversold", "verdict"}}
	for _, r := range reports {
		switch {
		case r.Strategy == BareRow:
			continue
		case r.Skipped != "":
			comparison.Rows = append(comparison.Rows, []string{r.Strategy, r.Family, "", "", "", "", "", "", "", "", "", "", r.VerdictText()})
			continue
		}
		busy := 0.0
		if r.Attempts > 0 {
			busy = 100 * float64(r.BusyAnswers) / float64(r.Attempts)
		}
		vs := ""
		if r.VsBaseline > 0 {
			vs = fmt.Sprintf("%.2fx", r.VsBaseline)
		}
		comparison.Rows = append(comparison.Rows, []string{r.Strategy, r.Family, fmt.Sprint(r.orders()), r.figure(figOrdersPerSecond, "%.0f", r.OrdersPerSecond), vs,
			r.figure(figSellingP50, "%.1f", ms(r.Selling.P50)) + " / " + r.figure(figSellingP99, "%.1f", ms(r.Selling.P99)),
			fmt.Sprintf("%d (%.0f%%)", r.BusyAnswers, busy), r.locksLostText(),
			fmt.Sprintf("%.0f", r.SoldOut.Throughput), Milliseconds(r.SoldOut.P99), r.rssText(), fmt.Sprint(r.Verdict.Oversold), r.VerdictText()})
	}
	if n := roundsOf(reports); n > 1 {
		comparison.Intro = fmt.Sprintf("Each row ran %d times, interleaved (round 1 of every row, then round 2 of every row, ...), each round on a fresh product and verified. "+
			"orders/s, p50 / p99, the sold-out req/s and vs bare, and the CPU per 1000 orders with the ceiling are the medians of the rounds, min–max in brackets; "+
			"the other cells are the median round's (by orders/s), and a round that failed fails its row.", n)
	}
	out := []table{comparison}
	if t, ok := queueTable(reports); ok {
		out = append(out, t)
	}
	if t, ok := checkoutTable(reports); ok {
		out = append(out, t)
	}
	if t, ok := lifecycleTable(reports); ok {
		out = append(out, t)
	}
	if t, ok := steadyTable(reports); ok {
		out = append(out, t)
	}
	if t, ok := goalsTable(reports); ok {
		out = append(out, t)
	}
	return append(out, cpuTables(reports)...)
}

// tablesByCount are the tables of a run at several client counts (-concurrency 64,512): each
// count's tables apart, the first of them saying which count it is.
func tablesByCount(reports []Row, counts []int) []table {
	var out []table
	for _, c := range counts {
		var at []Row
		for _, r := range reports {
			if r.Clients == c {
				at = append(at, r)
			}
		}
		ts := tables(at)
		ts[0].Intro = strings.TrimSpace(fmt.Sprintf("At %d clients: %s", c, ts[0].Intro))
		out = append(out, ts...)
	}
	return out
}

// clientCounts are the client counts of the rows, in the order they ran.
func clientCounts(reports []Row) []int {
	var out []int
	for _, r := range reports {
		if !slices.Contains(out, r.Clients) {
			out = append(out, r.Clients)
		}
	}
	return out
}

// locksLostText is the locks-lost cell: blank when not measured.
func (r Row) locksLostText() string {
	if r.LocksLost == nil {
		return ""
	}
	return fmt.Sprint(*r.LocksLost)
}

// orders are the orders the row's sale placed: its 201s, and the 202s that ended placed.
func (r Row) orders() int {
	if r.Queue == nil {
		return r.Outcomes[attack.OK]
	}
	return r.Outcomes[attack.OK] + r.Queue.Placed
}

// queueTable is the figures of every row whose sale was answered 202 (the queued strategy); ok
// is false if none was.
func queueTable(reports []Row) (t table, ok bool) {
	t.Intro = fmt.Sprintf("Queued orders: the sale was answered 202 (accepted) at admission, and the tool polled each order with "+
		"GET /api/v1/orders/{id}?wait=5s from the moment its 202 arrived, as a client would, until it left queued: placed (an order row) or rejected. "+
		"accepted/s runs from the sale's first request to its last 202, placed/s to the last placement a client saw; "+
		"every 202 must end within %s after the sale, and the audit must count none queued.", attack.EndWithin)
	t.Head = []string{"row", "accepted", "accepted/s", "placed", "placed/s", "rejected", "202 to final state p50 / p99 ms", "never ended"}
	for _, r := range reports {
		if q := r.Queue; q != nil {
			ok = true
			t.Rows = append(t.Rows, []string{r.Strategy, fmt.Sprint(q.Accepted), r.figure(figAcceptedPerSec, "%.0f", q.AcceptedPerSecond), fmt.Sprint(q.Placed),
				r.figure(figOrdersPerSecond, "%.0f", q.PlacedPerSecond), fmt.Sprint(q.Rejected),
				r.figure(figQueuedEndP50, "%.1f", ms(q.EndP50)) + " / " + r.figure(figQueuedEndP99, "%.1f", ms(q.EndP99)), fmt.Sprint(q.Unended)})
		}
	}
	return t, ok
}

// checkoutTable puts every checkout row beside the single orders of its strategy in the same
// pass; ok is false if the run sold no checkouts.
func checkoutTable(reports []Row) (t table, ok bool) {
	t.Intro = fmt.Sprintf("Checkouts: the same sale, every request a checkout of one unit of each of several products (POST /api/v1/checkouts), "+
		"all or nothing; verified per product, and every checkout whole in the store. Target: a 2-line checkout at %gx the single-order rate "+
		"of the same strategy or more, at 64 clients.", checkoutVsOrders)
	t.Head = []string{"row", "lines", "checkouts", "checkouts/s (selling)", "single orders/s, same strategy", "ratio", "verdict"}
	for _, r := range reports {
		if r.CheckoutLines == 0 || r.Skipped != "" {
			continue
		}
		ok = true
		single, ratio := "", ""
		for _, o := range reports {
			if o.CheckoutLines == 0 && o.Name == r.Name && o.Pass == r.Pass && o.Clients == r.Clients && o.OrdersPerSecond > 0 {
				single = fmt.Sprintf("%.0f", o.OrdersPerSecond)
				ratio = fmt.Sprintf("%.2fx", r.OrdersPerSecond/o.OrdersPerSecond)
			}
		}
		t.Rows = append(t.Rows, []string{r.Strategy, fmt.Sprint(r.CheckoutLines), fmt.Sprint(r.orders()),
			r.figure(figOrdersPerSecond, "%.0f", r.OrdersPerSecond), single, ratio, r.VerdictText()})
	}
	return t, ok
}

// checkoutVsOrders is the target of a 2-line checkout row: its checkouts/s over the single
// orders/s of the same strategy, at 64 clients.
const checkoutVsOrders = 0.4

// rssText is the peak RSS cell: blank when not measured.
func (r Row) rssText() string {
	switch {
	case r.PeakRSSMB == 0:
		return ""
	case r.PeakRSSSinceStart:
		return fmt.Sprintf("%.0f (since start)", r.PeakRSSMB)
	}
	return fmt.Sprintf("%.0f", r.PeakRSSMB)
}

// lifecycleTable is what the buyers did after each sale (-cancel, -unpaid); ok is false if they
// did nothing.
func lifecycleTable(reports []Row) (t table, ok bool) {
	t.Intro = "After the sale: the buyers cancelled a share of their orders and left a share unpaid (they expire when the payment timeout runs out); " +
		"the rest paid. Fresh buyers then bought the units that came back, and the verifier checked that every order is in the state its buyer's choice leads to " +
		"and that each unit came back once."
	t.Head = []string{"row", "cancelled", "unpaid (expired)", "paid", "no order pending after", "resold", "problems"}
	for _, r := range reports {
		if l := r.Lifecycle; l != nil {
			ok = true
			t.Rows = append(t.Rows, []string{r.Strategy, fmt.Sprint(l.Cancelled), fmt.Sprint(l.Unpaid), fmt.Sprint(l.Paid),
				l.ReturnedIn.Round(10 * time.Millisecond).String(), fmt.Sprint(l.Resold), fmt.Sprint(len(l.Problems))})
		}
	}
	return t, ok
}

// steadyTable is the steady sold-out phase of every row that had one; ok is false if none did.
func steadyTable(reports []Row) (t table, ok bool) {
	t.Head = []string{"row", "requests", "req/s", "vs bare", "p50 / p99 ms", "409 sold_out", "201 (oversold)", "429", "5xx", "other", "invariant after"}
	for _, r := range reports {
		s := r.Steady
		switch {
		case s == nil:
			continue
		case t.Intro == "":
			t.Intro = fmt.Sprintf("Sold-out phase: after the sale sold out and was verified, fresh buyers (each with a new Idempotency-Key) "+
				"ordered it for %s in the closed model; the bare handler is net/http alone answering the same requests 409 sold_out, "+
				"as many processes as instances, measured for as long as each phase and alternating with it in thirds "+
				"(vs bare is against that measurement; the bare row shows the median one). A 201 here is an oversell.", s.Duration.Round(time.Millisecond))
		}
		if s.Skipped != "" {
			t.Rows = append(t.Rows, []string{r.Strategy, "", "", "", "", "", "", "", "", "", "skipped: " + s.Skipped})
			continue
		}
		vs, after := "", ""
		switch {
		case s.Verdict == nil:
		case s.Verdict.OK():
			after = "holds"
		case r.ExpectOversell:
			after = fmt.Sprintf("oversold by %d, as expected", s.Verdict.Oversold)
		default:
			after = "FAIL: " + strings.Join(s.Verdict.Problems, "; ")
		}
		if s.VsBare > 0 {
			vs = r.figure(figVsBare, "%.2fx", s.VsBare)
		}
		t.Rows = append(t.Rows, []string{r.Strategy, fmt.Sprint(s.Requests), r.figure(figSoldOutPerSecond, "%.0f", s.Throughput), vs,
			Milliseconds(s.P50) + " / " + Milliseconds(s.P99), fmt.Sprint(s.Outcomes[attack.SoldOut]), fmt.Sprint(s.Outcomes[attack.OK]),
			fmt.Sprint(s.TooMany), fmt.Sprint(s.Server), fmt.Sprint(s.Unexpected()), after})
	}
	return t, len(t.Rows) > 0
}

// Markdown writes the report's tables.
func Markdown(w io.Writer, reports []Row) {
	for i, t := range tables(reports) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if t.Intro != "" {
			fmt.Fprintf(w, "%s\n\n", t.Intro)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(t.Head, " | "))
		fmt.Fprintln(w, "|"+strings.Repeat(" --- |", len(t.Head)))
		for _, row := range t.Rows {
			cells := append([]string{"`" + row[0] + "`"}, row[1:]...)
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
}

// htmlReport is report.html: the charts that compare the rows, the tables, then a latency chart
// per row. Everything is in the one file — styles and SVG, no script, no link — so that it opens
// anywhere, offline. The charts' text asks for Liberation Sans, which gonum/plot measured it in,
// or a face of its metrics.
var htmlReport = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>seckill load test</title>
<style>
body{font-family:"DejaVu Sans",Verdana,system-ui,sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;color:#222;line-height:1.45;font-size:14px}
h1{font-size:24px;margin:0 0 6px}
h2{font-size:19px;margin:36px 0 10px;padding-bottom:4px;border-bottom:1px solid #ddd}
p{max-width:1040px}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0 20px}
td,th{border:1px solid #d9d9d9;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f2}
tr:nth-child(even) td{background:#fafafa}
figure.chart{margin:10px 0 30px;padding:0}
figure.chart h3{font-size:16px;margin:0 0 6px 16px;color:#111}
.swatch{display:inline-block;width:14px;height:14px;margin-right:8px;vertical-align:-1px}
.drawing{display:grid;align-items:start}
.drawing svg{display:block;width:100%;height:auto}
svg text{font-family:"Liberation Sans",Arimo,Arial,Helvetica,sans-serif !important}
figcaption{font-size:12.5px;color:#555;margin:2px 16px 0;max-width:1080px}
</style></head><body>
<h1>seckill load test</h1>
<p>{{.Provenance}}</p>
<p>{{.Description}}</p>
{{with .Charts}}<h2>The rows side by side</h2>
{{range .}}{{template "chart" .}}{{end}}{{end}}
<h2>Tables</h2>
{{range .Tables}}{{with .Intro}}<p>{{.}}</p>{{end}}
<table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}
{{with .Scatters}}<h2>Every request, row by row</h2>
{{range .}}{{template "chart" .}}{{end}}{{end}}
</body></html>
{{define "chart"}}<figure class="chart" data-chart="{{.ID}}"{{with .Row}} data-row="{{.}}"{{end}}>
<h3>{{with .Swatch}}<span class="swatch" style="background:{{.}}"></span>{{end}}{{.Title}}</h3>
<div class="drawing" style="grid-template-columns:minmax(0,{{.PlotWidth}}fr) minmax(0,{{.LegendWidth}}fr)">
<div class="plot">{{.Plot}}</div>
<div class="legend">{{.Legend}}</div>
</div>
{{with .Note}}<figcaption>{{.}}</figcaption>{{end}}</figure>
{{end}}
`))

// fileName turns a row name ("hybrid (batched 64)") into a file name part ("hybrid-batched-64").
func fileName(row string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(row) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(c)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// Write saves the report files in dir: report.md, report.html with its charts, summary.json,
// and every result of every sale as JSON lines (results-<row>.json). provenance heads the
// reports, then description.
func Write(dir, provenance, description string, reports []Row, sales map[string]attack.Sale) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# seckill load test\n\n%s\n\n%s\n\n", provenance, description)
	Markdown(&md, reports)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	comparison, perRow := charts(reports, sales)
	if err := writeFile(filepath.Join(dir, "report.html"), func(w io.Writer) error {
		return htmlReport.Execute(w, map[string]any{"Provenance": provenance, "Description": description, "Charts": comparison, "Tables": tables(reports), "Scatters": perRow})
	}); err != nil {
		return err
	}
	for name, s := range sales {
		if err := writeFile(filepath.Join(dir, "results-"+fileName(name)+".json"), func(w io.Writer) error {
			enc := vegeta.NewJSONEncoder(w)
			for _, r := range s.Results {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "summary.json"), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	})
}

// writeFile creates path and fills it, reporting the error of Close too: a full disk shows there.
func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// cpuTables are the CPU tables of the rows (all of one client count): the selling phase per 1000
// orders with each row's CPU-bound ceiling, and the sold-out phase per 1000 answers, each when
// some row measured it.
func cpuTables(reports []Row) []table {
	var out []table
	for _, ph := range []struct {
		unit, intro string
		selling     bool
		get         func(*cpu.Cost) *cpu.Phase
	}{
		{"orders", "CPU seconds per 1000 orders in the selling phase (from the first request to the last sale's answer), per process group, from /proc/<pid>/stat",
			true, func(c *cpu.Cost) *cpu.Phase { return c.Selling }},
		{"answers", "CPU seconds per 1000 answers in the steady sold-out phase (the service's slices, not the bare handler's), per process group",
			false, func(c *cpu.Cost) *cpu.Phase { return c.SoldOut }},
	} {
		var t table
		var reasons []string
		cores := 0
		for _, r := range reports {
			if r.CPU == nil || ph.get(r.CPU) == nil {
				continue
			}
			p := ph.get(r.CPU)
			if t.Head == nil {
				t.Head = []string{"row", ph.unit, "seconds"}
				for _, g := range p.Groups {
					t.Head = append(t.Head, g.Group)
				}
				t.Head = append(t.Head, "all groups", "cores busy")
				if ph.selling {
					t.Head = append(t.Head, "ceiling orders/s", "reached", "waits on")
				}
			}
			// Only the selling phase's figures are medians of the rounds (Combine).
			figure := func(name, format string, v float64) string {
				if !ph.selling {
					return fmt.Sprintf(format, v)
				}
				return r.figure(name, format, v)
			}
			row := []string{r.Strategy, fmt.Sprint(p.Count), fmt.Sprintf("%.2f", p.WallSeconds)}
			for _, g := range p.Groups {
				if g.SecondsPer1000 == nil {
					row = append(row, "n/a")
					if reason := g.Group + ": " + g.NA; g.NA != "" && !slices.Contains(reasons, reason) {
						reasons = append(reasons, reason)
					}
					continue
				}
				row = append(row, figure(figGroupPrefix+g.Group, "%.3f", *g.SecondsPer1000))
			}
			seconds, all := p.Total()
			sum, busy := fmt.Sprintf("%.3f", 1000*seconds/float64(p.Count)), ""
			if c := r.Ceiling; ph.selling && c != nil {
				sum = figure(figAllGroups, "%.3f", 1000*c.SecondsPerOrder)
			}
			if p.WallSeconds > 0 {
				busy = fmt.Sprintf("%.2f", seconds/p.WallSeconds)
			}
			if !all {
				sum += " (measured groups)"
			}
			row = append(row, sum, busy)
			if ph.selling {
				row = append(row, r.ceilingCells()...)
				if r.Ceiling != nil {
					cores = r.Ceiling.Cores
				}
			}
			t.Rows = append(t.Rows, row)
		}
		if len(t.Rows) == 0 {
			continue
		}
		t.Intro = ph.intro + ". The service instances scale out; the database and Redis hold the one hot product; " +
			"the load generator shares the machine here and would not in a real sale. cores busy is all groups' CPU over the phase's wall time. " +
			"The database's figure counts every client it served meanwhile."
		if cores > 0 {
			t.Intro += fmt.Sprintf(" ceiling orders/s is the CPU-bound ceiling: the %d cores over all groups' CPU per order (with a group n/a, a bound above it), "+
				"and reached the row's orders/s over it. A row below %.1f of its ceiling waits on something other than the cores: "+
				"waits on names it where the tool measured it (busy answers retried after their Retry-After; a queued sale's writers, placing slower than admission accepted; "+
				"the lock, held most of the window, or its hand-off, "+
				"acquisitions waiting longer than the lock is held, from the lock histograms), and says unknown where it did not "+
				"(the row lock, timed inside its wait; round trips, which the tool does not count).", cores, waitShare)
		}
		if len(reasons) > 0 {
			t.Intro += " n/a: " + strings.Join(reasons, "; ") + "."
		}
		out = append(out, t)
	}
	return out
}

// ceilingCells are the ceiling's cells of the selling CPU table: blank when not measured.
func (r Row) ceilingCells() []string {
	c := r.Ceiling
	if c == nil {
		return []string{"", "", ""}
	}
	return []string{r.figure(figCeiling, "%.0f", c.OrdersPerSecond), r.figure(figReached, "%.2f", c.Reached), c.WaitsOn}
}

// roundsOf is the most rounds any row ran.
func roundsOf(reports []Row) int {
	n := 1
	for _, r := range reports {
		n = max(n, len(r.Rounds))
	}
	return n
}
