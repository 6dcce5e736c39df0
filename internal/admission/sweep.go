package admission

import (
	"context"
	"slices"
	"time"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Sweeping. A reservation lives as long as its instance beats, not for a fixed lease: a slow
// instance keeps its reservations, a stopped one loses them to the others' sweepers within its
// TTL. One that wakes and writes is decided by the database; the settle takes the units back.

// sweepGrace is how long a reservation in doubt is left alone: a commit sent before its section
// gave up has long reached the database by then. Doubts older than forgetDoubts are dropped.
const (
	sweepGrace   = time.Second
	forgetDoubts = time.Minute
)

// Pending reports which orphans without an order another may still write (their message went
// out: handed to the queue), and makes sure no one writes the others, whose units go back.
type Pending interface {
	Pending(ctx context.Context, sku string, held []Held) (writable map[string]bool, err error)
}

// orphan is a reservation a sweep may resolve, parsed and as stored: the sweep touches it only
// if it is still exactly that.
type orphan struct {
	Held
	stored string
}

// Sweep resolves, as the database decides, sku's reservations whose instance is not in live,
// and its own of no order in flight here: settled if the order exists, else its units returned
// unless another may still write it (Pending). It returns the units returned. Any instance may
// sweep at any time: each reservation is resolved once (lua/sweep.lua).
func (a *Ledger) Sweep(ctx context.Context, sku string, live []string) (int64, error) {
	if planted.On(planted.NoSweep) {
		return 0, nil
	}
	const batch = 500
	raw, err := orphansScript.Run(ctx, a.client, []string{KeysOf(sku).Reserved}, argsOf(live, batch, a.instance)...).StringSlice()
	if err != nil {
		return 0, err
	}
	// raw holds each user once (a hash's fields): user, reservation as stored, ...
	now := a.opts.Clock()
	var found []orphan
	var ids []string
	for i := 0; i+1 < len(raw); i += 2 {
		if h, _ := parseHeld(raw[i], raw[i+1]); h.instance != a.instance || a.sweepable(h.ID, now) {
			found, ids = append(found, orphan{h, raw[i+1]}), append(ids, h.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	placed, err := a.store.Placed(ctx, ids)
	if err != nil {
		return 0, err
	}
	if found, err = a.leaveWritable(ctx, sku, found, placed); err != nil || len(found) == 0 {
		return 0, err
	}
	ids, args := make([]string, len(found)), make([]any, 0, 3*len(found))
	for i, o := range found {
		ids[i] = o.ID
		args = append(args, o.User, o.stored, placed[o.ID]) // a bool goes as 1 or 0
	}
	out, err := sweepScript.Run(ctx, a.client, withSwept(sku, ids), args...).Int64Slice()
	if err != nil {
		return 0, err
	}
	a.forget(ids, now)
	units := out[0]
	a.swept.WithLabelValues("returned").Add(float64(out[1]))
	a.swept.WithLabelValues("placed").Add(float64(out[2]))
	a.swept.WithLabelValues("retaken").Add(float64(out[3]))
	if units > 0 {
		a.log.Warn("reservations without an order returned to sale", "sku", sku, "units", units)
	}
	return units, nil
}

// leaveWritable hands over to the queue the reservations without an order that another may
// still write (Pending), out of the sweep. Without an answer from Pending, none is returned.
func (a *Ledger) leaveWritable(ctx context.Context, sku string, found []orphan, placed map[string]bool) ([]orphan, error) {
	var open []Held
	for _, o := range found {
		if !placed[o.ID] {
			open = append(open, o.Held)
		}
	}
	if a.opts.Pending == nil || len(open) == 0 {
		return found, nil
	}
	writable, err := a.opts.Pending.Pending(ctx, sku, open)
	if err != nil {
		a.log.Debug("orders of orphaned reservations not asked about; their units wait for the next sweep", "sku", sku, "err", err)
		return slices.DeleteFunc(found, func(o orphan) bool { return !placed[o.ID] }), nil
	}
	var handed []stock.OrderRequest
	for _, o := range found {
		if writable[o.ID] {
			handed = append(handed, stock.OrderRequest{UserID: o.User, Reservation: stock.Reservation{ID: o.ID}})
		}
	}
	if len(handed) > 0 {
		if err := a.handOver(ctx, sku, handed); err != nil {
			return nil, err
		}
	}
	return slices.DeleteFunc(found, func(o orphan) bool { return writable[o.ID] }), nil
}

// sweepable reports whether this instance's sweeper may resolve its own reservation id: not in
// flight here, and not in doubt within the grace.
func (a *Ledger) sweepable(id string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, tracked := a.tracked[id]
	return !tracked || !until.IsZero() && now.After(until)
}

// forget drops doubts past the grace of the reservations ids (swept now) and those older than
// forgetDoubts (gone from Redis: settled, given back or swept elsewhere).
func (a *Ledger) forget(ids []string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if until, ok := a.tracked[id]; ok && !until.IsZero() && now.After(until) {
			delete(a.tracked, id)
		}
	}
	for id, until := range a.tracked {
		if !until.IsZero() && now.Sub(until) > forgetDoubts {
			delete(a.tracked, id)
		}
	}
}
