package admission

import (
	"context"
	"strings"
	"time"

	"github.com/flashsale/seckill/internal/planted"
)

// Sweeping. A reservation lives as long as its instance shows it is alive (Beat, every TTL/4 or
// so), not for a fixed lease per order: a live instance with a slow database keeps its
// reservations, and a dead or frozen one (SIGKILL, SIGSTOP, a paused VM) loses them to the other
// instances' sweepers within its TTL and a sweep. So the last units of a sale are never stuck
// behind a process that stopped. A frozen instance may wake and write an order whose reservation
// was swept: the database's guard decides that write, and the settle takes the units back, once.
// An instance also sweeps its own reservations of orders it no longer has in flight: a give-back
// or a settle that could not reach Redis, or that a failover lost.

// sweepGrace is how long a reservation in doubt is left alone: a commit sent before its section
// gave up has long reached the database by then. Doubts older than forgetDoubts are dropped:
// swept, or gone from Redis.
const (
	sweepGrace   = time.Second
	forgetDoubts = time.Minute
)

// Pending is asked by the sweeper about reservations it found orphaned whose orders the database
// does not have, before it returns their units: it reports those whose orders someone else may
// still write (the queued strategy: the order's message went out), and makes sure no one ever
// writes the others. The sweeper leaves the first kind to their writers (handed over to the
// queue) and returns the units of the rest.
type Pending interface {
	Pending(ctx context.Context, sku string, held []Held) (writable map[string]bool, err error)
}

// Sweep resolves, as the database decides, sku's reservations whose instance is not alive, and
// this instance's own of no order in flight here (sweepable). One whose order exists is settled,
// whatever the order's state now (a cancel gave its units back itself). One without an order
// returns its units and its buyer to admission, unless another may still write the order
// (Pending), which then resolves it. Sweep returns the units returned. Any instance may sweep
// any product at any time: each reservation is resolved once (lua/sweep.lua). live is the
// instances alive now (Live), read once for every product of a sweep.
func (a *Ledger) Sweep(ctx context.Context, sku string, live []string) (int64, error) {
	if planted.On(planted.NoSweep) {
		return 0, nil
	}
	const batch = 500
	args := make([]any, 0, len(live)+2)
	args = append(args, batch, a.instance)
	for _, id := range live {
		args = append(args, id)
	}
	raw, err := orphansScript.Run(ctx, a.client, []string{KeysOf(sku).Reserved}, args...).StringSlice()
	if err != nil {
		return 0, err
	}
	// raw holds each user once (a hash's fields): user, reservation as stored, ...
	now := a.now()
	var users, helds, ids []string
	for i := 0; i+1 < len(raw); i += 2 {
		if id := reservationOf(raw[i+1]); instanceOf(raw[i+1]) != a.instance || a.sweepable(id, now) {
			users, helds, ids = append(users, raw[i]), append(helds, raw[i+1]), append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	placed, err := a.store.Placed(ctx, ids)
	if err != nil {
		return 0, err
	}
	if users, helds, ids, err = a.leaveWritable(ctx, sku, users, helds, ids, placed); err != nil || len(ids) == 0 {
		return 0, err
	}
	args = make([]any, 0, 3*len(users))
	for i, user := range users {
		flag := "0"
		if placed[ids[i]] {
			flag = "1"
		}
		args = append(args, user, helds[i], flag)
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

// leaveWritable takes out of a sweep the reservations without an order whose orders may still
// be written by another (Pending), and hands them over to the queue, whose writers resolve them.
// Without an answer from Pending, none of them is returned this time.
func (a *Ledger) leaveWritable(ctx context.Context, sku string, users, helds, ids []string, placed map[string]bool) ([]string, []string, []string, error) {
	if a.pending == nil {
		return users, helds, ids, nil
	}
	var open []Held
	for i, id := range ids {
		if !placed[id] {
			h, _ := parseHeld(users[i], helds[i])
			open = append(open, h)
		}
	}
	if len(open) == 0 {
		return users, helds, ids, nil
	}
	writable, err := a.pending.Pending(ctx, sku, open)
	if err != nil {
		a.log.Debug("orders of orphaned reservations not asked about; their units wait for the next sweep", "sku", sku, "err", err)
		writable = map[string]bool{}
		for _, h := range open {
			writable[h.ID] = true
		}
	}
	var keepU, keepH, keepI, handU, handI []string
	for i, id := range ids {
		if writable[id] {
			handU, handI = append(handU, users[i]), append(handI, id)
		} else {
			keepU, keepH, keepI = append(keepU, users[i]), append(keepH, helds[i]), append(keepI, id)
		}
	}
	if len(handI) > 0 && err == nil {
		if err := a.handOver(ctx, sku, handU, handI); err != nil {
			return nil, nil, nil, err
		}
	}
	return keepU, keepH, keepI, nil
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

// reservationOf is the reservation id of a reservation as admit.lua stores it.
func reservationOf(held string) string {
	id, _, _ := strings.Cut(held, "|")
	return id
}

// instanceOf is the instance of a reservation as admit.lua stores it.
func instanceOf(held string) string {
	if f := strings.SplitN(held, "|", 4); len(f) == 4 {
		return f[2]
	}
	return ""
}
