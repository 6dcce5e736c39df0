package report

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/flashsale/seckill/loadtest/cpu"
)

// Range is the lowest and the highest of one figure over a row's rounds.
type Range struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// The figures a row with several rounds reports as medians, as they are named in Row.Spread.
// Latencies are in milliseconds, the CPU in seconds per 1000 orders.
const (
	figOrdersPerSecond  = "orders_per_second"
	figSellingP50       = "selling_p50_ms"
	figSellingP99       = "selling_p99_ms"
	figSoldOutPerSecond = "sold_out_per_second"
	figVsBare           = "sold_out_vs_bare"
	figAllGroups        = "cpu_per_1000_orders:all groups"
	figCeiling          = "ceiling_orders_per_second"
	figReached          = "ceiling_reached"
	figGroupPrefix      = "cpu_per_1000_orders:"
	figAcceptedPerSec   = "accepted_per_second"
	figQueuedEndP50     = "queued_end_p50_ms"
	figQueuedEndP99     = "queued_end_p99_ms"
)

// Ceiling is the CPU-bound limit of a row's selling phase on this machine: were the cores
// busy with nothing else, and every process group spending per order what it spent, the cores
// would be full at OrdersPerSecond.
type Ceiling struct {
	Cores           int     `json:"cores"`
	SecondsPerOrder float64 `json:"cpu_seconds_per_order"` // all groups' CPU per order
	// AllGroups is false when a group was not measured: the CPU per order is then too low, the
	// ceiling too high and Reached too low, each a bound rather than the figure.
	AllGroups       bool    `json:"all_groups"`
	OrdersPerSecond float64 `json:"orders_per_second"` // Cores / SecondsPerOrder
	Reached         float64 `json:"reached"`           // the row's orders/s over OrdersPerSecond
	WaitsOn         string  `json:"waits_on,omitempty"`
}

// NewCeiling is the ceiling of a selling phase that cost p and sold at ordersPerSecond, on a
// machine of cores; nil when the phase's CPU was not measured.
func NewCeiling(ordersPerSecond float64, p *cpu.Phase, cores int) *Ceiling {
	if p == nil || p.Count == 0 || cores < 1 {
		return nil
	}
	seconds, all := p.Total()
	if seconds <= 0 {
		return nil
	}
	c := &Ceiling{Cores: cores, SecondsPerOrder: seconds / float64(p.Count), AllGroups: all}
	c.OrdersPerSecond = float64(cores) / c.SecondsPerOrder
	c.Reached = ordersPerSecond / c.OrdersPerSecond
	return c
}

// waitShare is the share of its ceiling below which a row is said to wait on something other
// than the cores.
const waitShare = 0.7

// heldShare is the share of the selling window the lock must be held for the lock itself —
// one holder at a time — to be named as what a row waits on.
const heldShare = 0.8

// waitUnknown starts what waitsOn says when what the tool measured does not tell.
const waitUnknown = "unknown"

// queueLag is how many times faster than its writers place orders a queued sale must accept
// them for its writers to be named as what it waits on: the queue grew while the sale lasted.
const queueLag = 1.5

// waitsOn says what a row far below its ceiling waits on, from what the tool measured of it:
// busy answers retried after their Retry-After, a queued sale's writers falling behind its
// 202s, the lock's hold and wait times. It says
// "unknown" when those do not tell, rather than guess: the tool does not count round trips.
func waitsOn(r Row) string {
	c := r.Ceiling
	switch {
	case c == nil:
		return ""
	case c.Reached >= waitShare:
		return "the cores: it gains only by costing less"
	case r.Attempts > r.Requests:
		return fmt.Sprintf("Retry-After: %d busy answers were retried after it, whole seconds each, inside the selling window", r.Attempts-r.Requests)
	case r.Queue != nil && r.Queue.AcceptedPerSecond > queueLag*r.Queue.PlacedPerSecond:
		return fmt.Sprintf("its writers: they placed %.0f orders/s while admission accepted %.0f/s, so the queue grew while the sale lasted and the sale ended when they had drained it",
			r.Queue.PlacedPerSecond, r.Queue.AcceptedPerSecond)
	}
	l := r.Locks
	if l == nil || l.Hold.Count == 0 || r.CPU == nil || r.CPU.Selling == nil || r.CPU.Selling.WallSeconds <= 0 {
		return waitUnknown
	}
	held := float64(l.Hold.Count) * l.Hold.Mean.Seconds() / r.CPU.Selling.WallSeconds
	switch {
	case held > 1:
		// One holder at a time cannot hold longer than the window: the histograms, taken over
		// all the row's phases, then hold more than its selling phase, and do not tell.
		return fmt.Sprintf(waitUnknown+": the lock's holds (%d of %s ms on average) add up to more than the selling window, so its histograms do not isolate it",
			l.Hold.Count, Milliseconds(l.Hold.Mean))
	case held >= heldShare:
		return fmt.Sprintf("the lock: held %.0f%% of the selling window (%d holds of %s ms on average), one holder at a time",
			100*held, l.Hold.Count, Milliseconds(l.Hold.Mean))
	case l.Wait.Count > 0 && l.Wait.Mean > l.Hold.Mean:
		return fmt.Sprintf("the lock hand-off: the lock was held %.0f%% of the selling window, while acquisitions waited %s ms on average for holds of %s ms",
			100*held, Milliseconds(l.Wait.Mean), Milliseconds(l.Hold.Mean))
	}
	return waitUnknown
}

// Combine makes one row of every row's rounds: rounds[k] is each row of round k+1 (a row is
// its name at its client count). A row of one round is that round's. A row of several has
// the median of each figure — orders/s, the selling p50 and p99, the sold-out answers/s and
// their ratio to the bare handler, the CPU per 1000 orders of every group and of all, the
// ceiling and the share of it reached — with its min–max in Spread, every round's row in
// Rounds, and every round's failures; its other cells are those of its median round by orders/s
// (Round). Rows keep the order they first ran in.
func Combine(rounds [][]Row) []Row {
	type key struct {
		name    string
		clients int
	}
	var order []key
	by := map[key][]Row{}
	for k, rows := range rounds {
		for _, r := range rows {
			id := key{r.Strategy, r.Clients}
			if _, ok := by[id]; !ok {
				order = append(order, id)
			}
			r.Round = k + 1
			by[id] = append(by[id], r)
		}
	}
	out := make([]Row, 0, len(order))
	for _, id := range order {
		out = append(out, combine(by[id]))
	}
	return out
}

// combine is the row of one row's rounds (see Combine).
func combine(rs []Row) Row {
	if len(rs) == 1 {
		r := rs[0]
		r.Round = 0
		if r.Ceiling != nil {
			c := *r.Ceiling
			c.WaitsOn = waitsOn(r)
			r.Ceiling = &c
		}
		return r
	}
	byRate := slices.SortedStableFunc(slices.Values(rs), func(a, b Row) int { return cmp.Compare(a.OrdersPerSecond, b.OrdersPerSecond) })
	r := byRate[(len(byRate)-1)/2]
	r.Rounds, r.Spread, r.Failed = rs, map[string]Range{}, nil
	for _, x := range rs {
		for _, f := range x.Failed {
			r.Failed = append(r.Failed, fmt.Sprintf("round %d: %s", x.Round, f))
		}
	}
	if r.Skipped != "" {
		return r
	}
	r.OrdersPerSecond, _ = r.median(figOrdersPerSecond, rs, func(x Row) (float64, bool) { return x.OrdersPerSecond, x.Skipped == "" })
	sold := func(x Row) bool { return x.Skipped == "" && x.Selling.Requests > 0 }
	if v, ok := r.median(figSellingP50, rs, func(x Row) (float64, bool) { return ms(x.Selling.P50), sold(x) }); ok {
		r.Selling.P50 = fromMS(v)
	}
	if v, ok := r.median(figSellingP99, rs, func(x Row) (float64, bool) { return ms(x.Selling.P99), sold(x) }); ok {
		r.Selling.P99 = fromMS(v)
	}
	r.combineSteady(rs)
	r.combineQueue(rs)
	r.combineCPU(rs)
	if r.Ceiling != nil {
		c := *r.Ceiling
		has := func(x Row) bool { return x.Ceiling != nil }
		per, _ := r.median(figAllGroups, rs, func(x Row) (float64, bool) { return 1000 * x.Ceiling.SecondsPerOrder, has(x) })
		c.SecondsPerOrder = per / 1000
		c.OrdersPerSecond, _ = r.median(figCeiling, rs, func(x Row) (float64, bool) { return x.Ceiling.OrdersPerSecond, has(x) })
		c.Reached, _ = r.median(figReached, rs, func(x Row) (float64, bool) { return x.Ceiling.Reached, has(x) })
		for _, x := range rs {
			c.AllGroups = c.AllGroups && (x.Ceiling == nil || x.Ceiling.AllGroups)
		}
		r.Ceiling = &c
		r.Ceiling.WaitsOn = waitsOn(r)
	}
	return r
}

// combineQueue puts the medians of a queued sale's figures in a copy of r's: accepted/s, and
// the time from 202 to the final state; placed/s is the row's orders/s.
func (r *Row) combineQueue(rs []Row) {
	if r.Queue == nil {
		return
	}
	q := *r.Queue
	has := func(x Row) bool { return x.Queue != nil }
	q.PlacedPerSecond = r.OrdersPerSecond
	q.AcceptedPerSecond, _ = r.median(figAcceptedPerSec, rs, func(x Row) (float64, bool) { return x.Queue.AcceptedPerSecond, has(x) })
	if v, ok := r.median(figQueuedEndP50, rs, func(x Row) (float64, bool) { return ms(x.Queue.EndP50), has(x) }); ok {
		q.EndP50 = fromMS(v)
	}
	if v, ok := r.median(figQueuedEndP99, rs, func(x Row) (float64, bool) { return ms(x.Queue.EndP99), has(x) }); ok {
		q.EndP99 = fromMS(v)
	}
	r.Queue = &q
}

// combineSteady puts the medians of the steady sold-out phase in a copy of r's.
func (r *Row) combineSteady(rs []Row) {
	if r.Steady == nil || r.Steady.Skipped != "" {
		return
	}
	s := *r.Steady
	measured := func(x Row) bool { return x.Steady != nil && x.Steady.Skipped == "" }
	s.Throughput, _ = r.median(figSoldOutPerSecond, rs, func(x Row) (float64, bool) { return x.Steady.Throughput, measured(x) })
	if v, ok := r.median(figVsBare, rs, func(x Row) (float64, bool) { return x.Steady.VsBare, measured(x) && x.Steady.VsBare > 0 }); ok {
		s.VsBare = v
	}
	if s.Bare != nil {
		// The bare figure the ratio's median goes with: the median of the bare measurements
		// beside the row's rounds (the ratio is taken round by round, where drift cancels).
		b := *s.Bare
		var vs []float64
		for _, x := range rs {
			if measured(x) && x.Steady.Bare != nil {
				vs = append(vs, x.Steady.Bare.Throughput)
			}
		}
		slices.Sort(vs)
		b.Throughput = median(vs)
		s.Bare = &b
	}
	r.Steady = &s
}

// combineCPU puts the medians of each group's CPU per 1000 orders while selling in a copy of
// r's; count, wall time and CPU seconds stay its round's.
func (r *Row) combineCPU(rs []Row) {
	if r.CPU == nil || r.CPU.Selling == nil {
		return
	}
	c, p := *r.CPU, *r.CPU.Selling
	p.Groups = slices.Clone(p.Groups)
	for i, g := range p.Groups {
		v, ok := r.median(figGroupPrefix+g.Group, rs, func(x Row) (float64, bool) { return x.sellingCPU(g.Group) })
		if ok {
			p.Groups[i].SecondsPer1000 = &v
		}
	}
	c.Selling = &p
	r.CPU = &c
}

// sellingCPU is group's CPU seconds per 1000 orders in the row's selling phase, if measured.
func (r Row) sellingCPU(group string) (float64, bool) {
	if r.CPU == nil || r.CPU.Selling == nil {
		return 0, false
	}
	j := slices.IndexFunc(r.CPU.Selling.Groups, func(g cpu.GroupCost) bool { return g.Group == group })
	if j < 0 || r.CPU.Selling.Groups[j].SecondsPer1000 == nil {
		return 0, false
	}
	return *r.CPU.Selling.Groups[j].SecondsPer1000, true
}

// median is the median of the figure get gives over the rounds it is measured in (ok), and
// records its min–max under name in r.Spread; ok is false when no round measured it.
func (r *Row) median(name string, rs []Row, get func(Row) (float64, bool)) (v float64, ok bool) {
	var vs []float64
	for _, x := range rs {
		if v, ok := get(x); ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	r.Spread[name] = Range{Min: vs[0], Max: vs[len(vs)-1]}
	return median(vs), true
}

// median is the middle of sorted, or the mean of its two middle values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMS(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// figure is a cell of a median figure: v as format writes it, and with several rounds its
// min–max.
func (r Row) figure(name, format string, v float64) string {
	cell := fmt.Sprintf(format, v)
	if s, ok := r.Spread[name]; ok {
		cell += fmt.Sprintf(" ("+format+"–"+format+")", s.Min, s.Max)
	}
	return cell
}
