package main

import (
	"fmt"
	"time"
)

// The targets of the open performance issue, measured side by side in one run. They inform and
// never fail the run: only a broken invariant does.
const (
	targetVsBaseline = 10.0                  // selling orders/s over the per-order FOR UPDATE baseline's
	targetVsBare     = 0.8                   // steady sold-out req/s over the bare handler's
	targetP99        = 50 * time.Millisecond // selling p99
	targetRSSMB      = 100.0                 // peak RSS of any one instance under load
	targetClients    = 64                    // the concurrency the targets are stated at
)

// goalNames head the targets table, in the order goals returns them.
var goalNames = []string{
	fmt.Sprintf("orders/s >= %gx baseline", targetVsBaseline),
	fmt.Sprintf("sold-out req/s >= %gx bare", targetVsBare),
	fmt.Sprintf("selling p99 <= %s ms", ms(targetP99)),
	fmt.Sprintf("peak RSS <= %g MB", targetRSSMB),
}

// goal is one target judged on one row. Met is nil when the run did not measure what the
// target needs, and Detail then says why.
type goal struct {
	Name   string `json:"name"`
	Met    *bool  `json:"met,omitempty"`
	Detail string `json:"detail"`
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

// goals judges a strategy's row against every target, given the run's baseline row (nil when
// not measured) and its concurrency; the sold-out phase carries its own bare measurement. It returns nil for rows that are not judged:
// the references themselves, skipped rows, and the unsafe control, whose speed is beside the
// point.
func goals(r report, baseline *report, clients int) []goal {
	if r.Strategy == bareRow || r.Strategy == "baseline" || r.Skipped != "" || r.ExpectOversell {
		return nil
	}
	at := ""
	if clients != targetClients {
		at = fmt.Sprintf(" at %d clients (stated at %d)", clients, targetClients)
	}
	judged := func(name string, met bool, detail string) goal { return goal{Name: name, Met: &met, Detail: detail} }
	var out []goal

	switch {
	case baseline == nil || baseline.OrdersPerSecond == 0:
		out = append(out, goal{Name: goalNames[0], Detail: "no baseline (it needs -mysql and -compare)"})
	default:
		ratio := r.OrdersPerSecond / baseline.OrdersPerSecond
		out = append(out, judged(goalNames[0], ratio >= targetVsBaseline,
			fmt.Sprintf("%.2fx (%.0f vs %.0f orders/s)%s", ratio, r.OrdersPerSecond, baseline.OrdersPerSecond, at)))
	}

	switch {
	case r.Steady == nil:
		out = append(out, goal{Name: goalNames[1], Detail: "no sold-out phase"})
	case r.Steady.Skipped != "":
		out = append(out, goal{Name: goalNames[1], Detail: r.Steady.Skipped})
	case r.Steady.Bare == nil || r.Steady.Bare.Throughput == 0:
		out = append(out, goal{Name: goalNames[1], Detail: "no bare handler (it needs -compare and -soldout)"})
	default:
		ratio := r.Steady.VsBare
		out = append(out, judged(goalNames[1], ratio >= targetVsBare,
			fmt.Sprintf("%.2fx (%.0f vs %.0f req/s)", ratio, r.Steady.Throughput, r.Steady.Bare.Throughput)))
	}

	if r.Selling.Requests == 0 {
		out = append(out, goal{Name: goalNames[2], Detail: "no selling phase"})
	} else {
		out = append(out, judged(goalNames[2], r.Selling.P99 <= targetP99, ms(r.Selling.P99)+" ms"+at))
	}

	if r.PeakRSSMB == 0 {
		out = append(out, goal{Name: goalNames[3], Detail: "not measured (it needs processes the tool starts)"})
	} else {
		since := ""
		if r.PeakRSSSinceStart {
			since = " (peak since the process started)"
		}
		out = append(out, judged(goalNames[3], r.PeakRSSMB <= targetRSSMB, fmt.Sprintf("%.0f MB%s", r.PeakRSSMB, since)))
	}
	return out
}
