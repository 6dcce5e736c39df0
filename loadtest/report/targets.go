package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flashsale/seckill/loadtest/cpu"
)

// targetSet is the performance targets (README, Performance) at one client count, each row
// judged against those of its own count, measured side by side in one run. They inform and
// never fail the run: only a broken invariant does.
type targetSet struct {
	Clients             int           // the concurrency the set is stated at
	VsBaseline          float64       // selling orders/s over the per-order FOR UPDATE baseline's, same client count
	HybridVsPessimistic float64       // hybrid's selling orders/s over pessimistic's, same pass
	HybridCPU           float64       // hybrid's service CPU per order over pessimistic's, same pass, at most
	VsBare              float64       // steady sold-out req/s over the bare handler's
	P99                 time.Duration // selling p99
	RSSMB               float64       // peak RSS of any one instance under load
	AcceptedVsSoldOut   float64       // queued: 202s/s over the sold-out answers/s of the same row
	QueuedEndP99        time.Duration // queued: from the 202 to the final state, p99
}

// targetSets are the stated sets, by client count. At 512 clients the sold-out ceiling and the
// tail are looser: eight times the clients queue eight times as deep on the same two cores.
var targetSets = []targetSet{
	{Clients: 64, VsBaseline: 5, HybridVsPessimistic: 0.8, HybridCPU: 1.2, VsBare: 0.8, P99: 50 * time.Millisecond, RSSMB: 100,
		AcceptedVsSoldOut: 0.8, QueuedEndP99: time.Second},
	{Clients: 512, VsBaseline: 5, HybridVsPessimistic: 0.8, HybridCPU: 1.2, VsBare: 0.7, P99: 200 * time.Millisecond, RSSMB: 100,
		AcceptedVsSoldOut: 0.8, QueuedEndP99: 3 * time.Second},
}

// targetsAt is the set a run at clients is judged against: the one stated at that count, or
// else the nearest (the lower one on a tie: the stricter).
func targetsAt(clients int) targetSet {
	best := targetSets[0]
	for _, ts := range targetSets[1:] {
		if abs(ts.Clients-clients) < abs(best.Clients-clients) {
			best = ts
		}
	}
	return best
}

func abs(n int) int { return max(n, -n) }

// The targets in the order goals judges them and the targets table shows them.
const (
	goalVsBaseline = iota
	goalHybridVsPessimistic
	goalVsBare
	goalP99
	goalRSS
	goalAcceptedVsSoldOut
	goalPlacedVsHybrid
	goalQueuedEndP99
	goalHybridCPU
	goalCeiling
)

// names head the targets table, indexed by the goal constants.
func (ts targetSet) names() []string {
	return []string{
		goalVsBaseline:          fmt.Sprintf("orders/s >= %gx baseline", ts.VsBaseline),
		goalHybridVsPessimistic: fmt.Sprintf("hybrid >= %gx pessimistic", ts.HybridVsPessimistic),
		goalHybridCPU:           fmt.Sprintf("hybrid service CPU <= %gx pessimistic's", ts.HybridCPU),
		goalCeiling:             fmt.Sprintf("reached >= %g of ceiling, or its wait named", waitShare),
		goalVsBare:              fmt.Sprintf("sold-out req/s >= %gx bare", ts.VsBare),
		goalP99:                 fmt.Sprintf("selling p99 <= %s ms", Milliseconds(ts.P99)),
		goalRSS:                 fmt.Sprintf("peak RSS <= %g MB", ts.RSSMB),
		goalAcceptedVsSoldOut:   fmt.Sprintf("202/s >= %gx sold-out req/s", ts.AcceptedVsSoldOut),
		goalPlacedVsHybrid:      "placed/s >= hybrid's orders/s",
		goalQueuedEndP99:        fmt.Sprintf("202 to final p99 <= %s ms", Milliseconds(ts.QueuedEndP99)),
	}
}

// statedText says which set a count is judged against, when it is not its own.
func (ts targetSet) statedText(clients int) string {
	if clients == ts.Clients {
		return fmt.Sprintf("at %d clients", clients)
	}
	return fmt.Sprintf("at %d clients, judged against those stated at %d, the nearest stated count", clients, ts.Clients)
}

// goal is one target judged on one row. Met is nil when the run did not measure what the
// target needs, and Detail then says why.
type goal struct {
	Name     string `json:"name"`
	Met      *bool  `json:"met,omitempty"`
	Detail   string `json:"detail"`
	StatedAt int    `json:"stated_at"` // the client count of the set it was judged against
}

// text is the table cell: the judgement with its numbers.
func (g goal) text() string {
	switch {
	case g.Met == nil:
		return "n/a: " + g.Detail
	case *g.Met:
		return "yes: " + g.Detail
	}
	return "NO: " + g.Detail
}

// Goals judges a strategy's row against the targets of its client count, given the other rows
// of its pass (hybrid is held against pessimistic there: the same processes, configuration and
// load) and the baseline measured at the same count (nil when not measured); the sold-out phase
// carries its own bare measurement. Only the hybrid row has the two goals against pessimistic
// (orders/s, and, its CPU measured, the service's CPU per order), and only a row answered 202
// (queued) the three of the queue: its 202s against its own sold-out answers (admission is the
// front door of both), its placed/s against hybrid's orders/s in the pass, and the time from a
// 202 to the final state. A row whose CPU was measured is held against its ceiling. It returns
// nil for rows that are not judged: the references themselves, skipped rows, and the unsafe
// controls, whose speed is beside the point.
func Goals(r Row, pass []Row, baseline *Row) []goal {
	// A checkout row is judged in the checkouts table, against its strategy's single orders.
	if r.Strategy == BareRow || r.Strategy == "baseline" || r.Skipped != "" || r.ExpectOversell || r.CheckoutLines > 0 {
		return nil
	}
	ts := targetsAt(r.Clients)
	names := ts.names()
	judged := func(i int, met bool, detail string) goal {
		return goal{Name: names[i], Met: &met, Detail: detail, StatedAt: ts.Clients}
	}
	unmeasured := func(i int, why string) goal { return goal{Name: names[i], Detail: why, StatedAt: ts.Clients} }
	var out []goal

	switch {
	case baseline == nil || baseline.OrdersPerSecond == 0:
		out = append(out, unmeasured(goalVsBaseline, "no baseline (it needs -mysql and -compare)"))
	default:
		ratio := r.OrdersPerSecond / baseline.OrdersPerSecond
		out = append(out, judged(goalVsBaseline, ratio >= ts.VsBaseline,
			fmt.Sprintf("%.2fx (%.0f vs %.0f orders/s)", ratio, r.OrdersPerSecond, baseline.OrdersPerSecond)))
	}

	if r.Name == "hybrid" {
		out = append(out, hybridVsPessimistic(r, pass, ts, judged, unmeasured))
	}

	switch {
	case r.Steady == nil:
		out = append(out, unmeasured(goalVsBare, "no sold-out phase"))
	case r.Steady.Skipped != "":
		out = append(out, unmeasured(goalVsBare, r.Steady.Skipped))
	case r.Steady.Bare == nil || r.Steady.Bare.Throughput == 0:
		out = append(out, unmeasured(goalVsBare, "no bare handler (it needs -compare and -soldout)"))
	default:
		ratio := r.Steady.VsBare
		out = append(out, judged(goalVsBare, ratio >= ts.VsBare,
			fmt.Sprintf("%.2fx (%.0f vs %.0f req/s)", ratio, r.Steady.Throughput, r.Steady.Bare.Throughput)))
	}

	if r.Selling.Requests == 0 {
		out = append(out, unmeasured(goalP99, "no selling phase"))
	} else {
		out = append(out, judged(goalP99, r.Selling.P99 <= ts.P99, Milliseconds(r.Selling.P99)+" ms"))
	}

	if r.PeakRSSMB == 0 {
		out = append(out, unmeasured(goalRSS, "not measured (it needs processes the tool starts)"))
	} else {
		since := ""
		if r.PeakRSSSinceStart {
			since = " (peak since the process started)"
		}
		out = append(out, judged(goalRSS, r.PeakRSSMB <= ts.RSSMB, fmt.Sprintf("%.0f MB%s", r.PeakRSSMB, since)))
	}
	if r.Queue != nil {
		out = append(out, queueGoals(r, pass, ts, judged, unmeasured)...)
	}
	if r.Name == "hybrid" && r.CPU != nil {
		out = append(out, hybridCPU(r, pass, ts, judged, unmeasured))
	}
	if r.Ceiling != nil {
		out = append(out, ceilingGoal(r, judged))
	}
	return out
}

// queueGoals judges a queued row: 202s/s against the row's own sold-out answers/s, placed/s
// against hybrid's orders/s in the same pass, and the p99 from a 202 to the final state.
func queueGoals(r Row, pass []Row, ts targetSet, judged func(int, bool, string) goal, unmeasured func(int, string) goal) []goal {
	q := r.Queue
	var out []goal
	switch {
	case r.Steady == nil || r.Steady.Skipped != "" || r.Steady.Throughput == 0:
		out = append(out, unmeasured(goalAcceptedVsSoldOut, "no sold-out phase"))
	default:
		ratio := q.AcceptedPerSecond / r.Steady.Throughput
		out = append(out, judged(goalAcceptedVsSoldOut, ratio >= ts.AcceptedVsSoldOut,
			fmt.Sprintf("%.2fx (%.0f vs %.0f req/s)", ratio, q.AcceptedPerSecond, r.Steady.Throughput)))
	}
	i := slices.IndexFunc(pass, func(p Row) bool { return p.Name == "hybrid" })
	switch {
	case i < 0:
		out = append(out, unmeasured(goalPlacedVsHybrid, "no hybrid row in this pass (it needs -compare)"))
	case pass[i].Skipped != "" || pass[i].OrdersPerSecond == 0:
		out = append(out, unmeasured(goalPlacedVsHybrid, "hybrid sold nothing in this pass"))
	default:
		h := pass[i].OrdersPerSecond
		out = append(out, judged(goalPlacedVsHybrid, q.PlacedPerSecond >= h,
			fmt.Sprintf("%.2fx (%.0f vs %.0f orders/s)", q.PlacedPerSecond/h, q.PlacedPerSecond, h)))
	}
	return append(out, judged(goalQueuedEndP99, q.EndP99 <= ts.QueuedEndP99, Milliseconds(q.EndP99)+" ms"))
}

// hybridCPU holds hybrid's service CPU per order while selling against pessimistic's in the same
// pass: what the recommended pattern costs the instances, which scale out, per order it sells.
func hybridCPU(r Row, pass []Row, ts targetSet, judged func(int, bool, string) goal, unmeasured func(int, string) goal) goal {
	pess, ok := pessimisticIn(pass)
	if !ok {
		return unmeasured(goalHybridCPU, noPessimistic)
	}
	h, okH := r.sellingCPU(cpu.Service)
	p, okP := pess.sellingCPU(cpu.Service)
	if !okH || !okP || p == 0 {
		return unmeasured(goalHybridCPU, "the service's CPU not measured in both rows")
	}
	return judged(goalHybridCPU, h <= ts.HybridCPU*p, fmt.Sprintf("%.2fx (%.3f vs %.3f s per 1000 orders)", h/p, h, p))
}

// ceilingGoal holds a row with a ceiling (its CPU measured) against it: near it, or below it
// with what it waits on named from what the tool measured.
func ceilingGoal(r Row, judged func(int, bool, string) goal) goal {
	c := r.Ceiling
	switch {
	case c.Reached >= waitShare:
		return judged(goalCeiling, true, fmt.Sprintf("%.2f of %.0f orders/s", c.Reached, c.OrdersPerSecond))
	case strings.HasPrefix(c.WaitsOn, waitUnknown):
		return judged(goalCeiling, false, fmt.Sprintf("%.2f of %.0f orders/s, its wait unknown", c.Reached, c.OrdersPerSecond))
	}
	return judged(goalCeiling, true, fmt.Sprintf("%.2f of %.0f orders/s, its wait named", c.Reached, c.OrdersPerSecond))
}

// hybridVsPessimistic holds hybrid's selling rate against pessimistic's in the same pass: the
// recommended pattern should not cost much against the plain row lock it keeps off the hot row.
func hybridVsPessimistic(r Row, pass []Row, ts targetSet, judged func(int, bool, string) goal, unmeasured func(int, string) goal) goal {
	p, ok := pessimisticIn(pass)
	switch {
	case !ok:
		return unmeasured(goalHybridVsPessimistic, noPessimistic)
	case p.Skipped != "" || p.OrdersPerSecond == 0:
		return unmeasured(goalHybridVsPessimistic, "pessimistic sold nothing in this pass")
	}
	ratio := r.OrdersPerSecond / p.OrdersPerSecond
	return judged(goalHybridVsPessimistic, ratio >= ts.HybridVsPessimistic,
		fmt.Sprintf("%.2fx (%.0f vs %.0f orders/s)", ratio, r.OrdersPerSecond, p.OrdersPerSecond))
}

// noPessimistic is why hybrid's goals against pessimistic go unjudged in a pass without it.
const noPessimistic = "no pessimistic row in this pass (it needs -compare)"

// pessimisticIn is the pass's pessimistic row, which hybrid's goals are held against.
func pessimisticIn(pass []Row) (Row, bool) {
	i := slices.IndexFunc(pass, func(p Row) bool { return p.Name == "pessimistic" })
	if i < 0 {
		return Row{}, false
	}
	return pass[i], true
}

// goalsTable is the targets of every judged row, the rows all of one client count; ok is false if
// none was judged. A target no row was judged on (hybrid against pessimistic, without hybrid)
// has no column.
func goalsTable(reports []Row) (t table, ok bool) {
	var judged []Row
	for _, r := range reports {
		if len(r.Goals) > 0 {
			judged = append(judged, r)
		}
	}
	if len(judged) == 0 {
		return t, false
	}
	clients := judged[0].Clients
	ts := targetsAt(clients)
	t.Intro = fmt.Sprintf("Targets %s (informational: only the invariant fails a run):", ts.statedText(clients))
	var names []string
	for _, name := range ts.names() {
		if slices.ContainsFunc(judged, func(r Row) bool { return slices.ContainsFunc(r.Goals, func(g goal) bool { return g.Name == name }) }) {
			names = append(names, name)
		}
	}
	t.Head = append([]string{"row"}, names...)
	for _, r := range judged {
		row := []string{r.Strategy}
		for _, name := range names {
			cell := ""
			if i := slices.IndexFunc(r.Goals, func(g goal) bool { return g.Name == name }); i >= 0 {
				cell = r.Goals[i].text()
			}
			row = append(row, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t, true
}
