package admission

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Admit asks Redis whether req may go on to the lock and the database, reserving its units
// under req.Reservation.ID, or a random id when it has none (the queued strategy gives its order
// id, which its message and its order record carry, so a sweeper can ask about the order). It
// returns the reservation (the caller must Settle or GiveBack it), or stock.ErrSoldOut (final:
// no unit left, and none held by an order that could give it back), stock.ErrBusy (too few
// units left, but orders in their sections hold some: retry), stock.ErrAlreadyPurchased,
// stock.ErrDuplicateRequest (a request with the same Idempotency-Key holds the buyer's
// reservation: it is in flight), stock.ErrNotFound, or ErrRedisDown. With Options.Batch, the
// buyers of a product that arrive while its last call is out go to Redis together (ask).
func (a *Ledger) Admit(ctx context.Context, req stock.OrderRequest) (stock.Reservation, error) {
	return a.AdmitWithin(ctx, req, 0)
}

// AdmitWithin is Admit for an order that waits behind every other of its product (the queued
// strategy's): while the product holds bound reservations or more — orders admitted and not yet
// written or given back, on any instance — it answers stock.ErrBusy, units left or not, so that
// no order waits behind more than bound others. 0: no bound.
func (a *Ledger) AdmitWithin(ctx context.Context, req stock.OrderRequest, bound int) (stock.Reservation, error) {
	if !a.Available() {
		return stock.Reservation{}, ErrRedisDown
	}
	if planted.On(planted.IgnoredWaitingBound) {
		bound = 0
	}
	a.touch(req.SKU)
	res := req.Reservation
	if res.ID == "" {
		res.ID = reservationID()
	}
	// Tracked before Redis has it, so that this instance's sweeper never takes a reservation of
	// an order in flight here for one it lost track of.
	a.track(res.ID, time.Time{})
	b := buyer{req: req, id: res.ID, bound: bound}
	code, err := a.ask(ctx, b)
	heldWait := a.heldWait
	if planted.On(planted.HeldAtOnce) {
		heldWait = 0
	}
	// Sold out is final, so while orders in their sections hold the units left, which they may
	// give back, the answer is busy: told sold out, a buyer could see a later one get the unit.
	// Held units are decided within a section's time: ask again until they are, and answer
	// busy only once the wait budget ran out. A buyer told busy at once comes back while
	// nobody knows whether a unit is left.
	start := time.Now()
	for pause := time.Millisecond; code == 4 && err == nil && time.Since(start)+pause < heldWait; pause = min(2*pause, 16*time.Millisecond) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(pause/2 + rand.N(pause)):
			code, err = a.ask(ctx, b)
		}
	}
	if code != 0 || err != nil {
		a.Done(res)
	}
	if err != nil {
		return stock.Reservation{}, err
	}
	if err := a.answer(req, code, heldWait, bound); err != nil {
		return stock.Reservation{}, err
	}
	return res, nil
}

// answer is what admission's code (lua/admit.lua) means for req, counted: nil when admitted.
func (a *Ledger) answer(req stock.OrderRequest, code int64, heldWait time.Duration, bound int) error {
	switch code {
	case 0:
		a.results.WithLabelValues("admitted").Inc()
		return nil
	case 1:
		a.results.WithLabelValues("sold_out").Inc()
		return fmt.Errorf("admission %s: %w", req.SKU, stock.ErrSoldOut)
	case 2:
		a.results.WithLabelValues("already_purchased").Inc()
		return fmt.Errorf("admission %s/%s: %w", req.SKU, req.UserID, stock.ErrAlreadyPurchased)
	case 3:
		a.results.WithLabelValues("in_flight").Inc()
		return fmt.Errorf("admission %s/%s: key %q in flight: %w", req.SKU, req.UserID, req.IdempotencyKey, stock.ErrDuplicateRequest)
	case 4:
		a.results.WithLabelValues("held").Inc()
		return stock.Busy(stock.BusyHeld, fmt.Errorf("admission %s: the units left are held by orders in their sections, which may give them back, still after %s",
			req.SKU, heldWait))
	case 5:
		a.results.WithLabelValues("waiting").Inc()
		return stock.Busy(stock.BusyWaiting, fmt.Errorf("admission %s: %d orders are waiting to be written, the most allowed", req.SKU, bound))
	}
	return fmt.Errorf("admission %s: answer %d: %w", req.SKU, code, ErrRedisDown)
}

// buyer is one order asking admission: its request, the id of the reservation it takes, and
// the most reservations its product may hold with it (AdmitWithin; 0: no bound).
type buyer struct {
	req   stock.OrderRequest
	id    string
	bound int
}

// admit runs lua/admit.lua once for buyers, all of sku, and returns their answers in order,
// warming the counter from the database first if it is missing.
func (a *Ledger) admit(ctx context.Context, sku string, buyers []buyer) ([]int64, error) {
	args := make([]any, 0, 1+5*len(buyers))
	args = append(args, a.instance)
	for _, b := range buyers {
		args = append(args, b.req.UserID, b.req.Quantity, b.id, b.req.IdempotencyKey, b.bound)
	}
	for warmed := false; ; warmed = true {
		codes, err := admitScript.Run(ctx, a.client, KeysOf(sku).all(), args...).Int64Slice()
		if err == nil && len(codes) != len(buyers) {
			err = fmt.Errorf("%d answers for %d buyers", len(codes), len(buyers))
		}
		if err != nil {
			if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errAdmitSlow) {
				return nil, ctx.Err()
			}
			a.Down("admission", err)
			return nil, fmt.Errorf("%w: %w", ErrRedisDown, err)
		}
		if codes[0] != -1 {
			a.calls.Observe(float64(len(buyers)))
			return codes, nil
		}
		if warmed {
			return nil, fmt.Errorf("admission %s: counter vanished right after warming: %w", sku, ErrRedisDown)
		}
		if err := a.warm(ctx, sku, "nx"); err != nil {
			return nil, err
		}
	}
}

// reservationID is a random id that tells one reservation of a buyer from a later one.
func reservationID() string {
	b := make([]byte, 9)
	_, _ = crand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// touch records that this instance admits orders for sku, so that its sweeper watches it.
// Written at most once a second per SKU: the hot path only reads.
func (a *Ledger) touch(sku string) {
	now := a.now()
	if last, ok := a.recent.Load(sku); ok && now.Sub(last.(time.Time)) < time.Second {
		return
	}
	a.recent.Store(sku, now)
}

// warm writes the admission state of sku from the database: mode "nx" only where no counter
// exists (never overwrite a live one), "force" to replace it.
func (a *Ledger) warm(ctx context.Context, sku, mode string) error {
	p, err := a.store.Product(ctx, sku)
	if err != nil {
		return err
	}
	buyers, err := a.store.Buyers(ctx, sku)
	if err != nil {
		return err
	}
	args := make([]any, 0, len(buyers)+2)
	args = append(args, mode, p.Stock)
	for _, b := range buyers {
		args = append(args, b)
	}
	wrote, err := warmScript.Run(ctx, a.client, KeysOf(sku).all(), args...).Int()
	if err != nil {
		a.Down("warm", err)
		return fmt.Errorf("warm %s: %w: %w", sku, ErrRedisDown, err)
	}
	if wrote == 1 {
		a.results.WithLabelValues("warmed").Inc()
	}
	return nil
}

// Admission in batches. Every buyer of a hot product asks Redis the same question of the same
// keys, and under load most of them arrive while an earlier call for it is out. With
// Options.Batch n, those wait for it and then go together (keyqueue): one script call for up to
// n buyers, each answered exactly as if it had asked alone, in order (lua/admit.lua). The ledger
// is the same, and Redis runs one script where it ran n. A buyer who comes to an idle product
// goes at once, alone, and none waits for more than the call before its own.

// errAdmitSlow is the cause of a batch's end when Redis did not answer within admitTimeout: the
// breaker's business, unlike a buyer who gave up.
var errAdmitSlow = errors.New("admission call took too long")

// admitTimeout bounds one call of a batch, which no buyer's context does.
const admitTimeout = 3 * time.Second

// roundContext is the context of one call of a batch: a call serves many buyers, so the one
// who happened to start it must not cut it off.
func roundContext() (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(context.Background(), admitTimeout, errAdmitSlow)
}

// call is a buyer waiting for its batch's answer.
type call struct {
	buyer
	code int64
	err  error
	done chan struct{}
}

// ask returns b's answer from lua/admit.lua: asked on its own, or in its product's next batch.
// A buyer that gives up (ctx) before its batch went is never asked; once asked, it waits for
// the answer, so that a reservation it took is never left behind untracked.
func (a *Ledger) ask(ctx context.Context, b buyer) (int64, error) {
	if a.batch <= 1 {
		codes, err := a.admit(ctx, b.req.SKU, []buyer{b})
		if err != nil {
			return 0, err
		}
		return codes[0], nil
	}
	c := &call{buyer: b, done: make(chan struct{})}
	if err := a.admits.Await(ctx, b.req.SKU, c, c.done); err != nil {
		return 0, err
	}
	return c.code, c.err
}

// admitRound is one admission call for the buyers of sku waiting in the queue.
func (a *Ledger) admitRound(sku string, take func() []*call) {
	calls := take()
	if len(calls) == 0 {
		return
	}
	ctx, cancel := roundContext()
	defer cancel()
	buyers := make([]buyer, len(calls))
	for i, c := range calls {
		buyers[i] = c.buyer
	}
	codes, err := a.admit(ctx, sku, buyers)
	for i, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.code = codes[i]
		}
		close(c.done)
	}
}
