package admission

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Admit asks Redis whether lines (a checkout's, in SKU order) may go on to the lock and the
// database: every line, or none. Each reserves its units under its Reservation.ID, or a random
// one. It returns a reservation per line, which the caller must Settle or GiveBack;
// ErrRedisDown; or the refusal (stock.Refusal) of stock.ErrSoldOut (final), stock.ErrBusy (held
// units), stock.ErrAlreadyPurchased, stock.ErrDuplicateRequest or stock.ErrNotFound. With
// bound > 0, a product holding bound reservations answers busy: no order waits behind more.
func (a *Ledger) Admit(ctx context.Context, lines []stock.OrderRequest, bound int) ([]stock.Reservation, error) {
	heldWait := a.opts.WaitHeld
	if planted.On(planted.HeldAtOnce) {
		heldWait = 0
	}
	return a.admitWithin(ctx, lines, bound, heldWait)
}

// AdmitOnce is Admit asking Redis once: held units answer busy at once. The queued strategy
// admits a batch together: one waiting here for units another of it holds would hold them all.
func (a *Ledger) AdmitOnce(ctx context.Context, lines []stock.OrderRequest, bound int) ([]stock.Reservation, error) {
	return a.admitWithin(ctx, lines, bound, 0)
}

// admitWithin is Admit, waiting at most heldWait for held units.
func (a *Ledger) admitWithin(ctx context.Context, lines []stock.OrderRequest, bound int, heldWait time.Duration) ([]stock.Reservation, error) {
	if planted.On(planted.IgnoredWaitingBound) {
		bound = 0
	}
	if _, cluster := a.client.(*redis.ClusterClient); cluster && len(lines) > 1 {
		return a.lineByLine(ctx, lines, bound, heldWait)
	}
	if !a.Available() {
		return nil, ErrRedisDown
	}
	r := request{lines: lines, res: make([]stock.Reservation, len(lines)), bound: bound}
	for i, l := range lines {
		a.touch(l.SKU)
		if r.res[i] = l.Reservation; r.res[i].ID == "" {
			r.res[i].ID = reservationID()
		}
		// Tracked before Redis has it, so that this instance's sweeper never takes it for lost.
		a.track(r.res[i].ID, time.Time{})
	}
	codes, err := a.ask(ctx, r)
	// Sold out is final, so held units answer busy: told sold out, a buyer could see a later one
	// get a unit given back. They are decided within a section's time: ask again until then.
	start := time.Now()
	for pause := time.Millisecond; err == nil && held(codes) && time.Since(start)+pause < heldWait; pause = min(2*pause, 16*time.Millisecond) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(pause/2 + rand.N(pause)):
			codes, err = a.ask(ctx, r)
		}
	}
	if err == nil {
		refused := make([]error, len(lines))
		for i, l := range lines {
			refused[i] = a.answer(l, codes[i], heldWait, bound)
		}
		err = stock.Refusal(lines, refused)
	}
	if err != nil {
		for _, res := range r.res {
			a.Done(res)
		}
		return nil, err
	}
	return r.res, nil
}

// held reports whether a request's only refusals are of held units, which may come back.
func held(codes []int64) bool {
	return slices.Contains(codes, 4) && !slices.ContainsFunc(codes, func(c int64) bool { return c != 0 && c != 4 })
}

// lineByLine is Admit on a Redis Cluster, which refuses a script whose keys span slots: line by
// line, the admitted given back at the first refusal (meanwhile others hear busy, not sold out).
func (a *Ledger) lineByLine(ctx context.Context, lines []stock.OrderRequest, bound int, heldWait time.Duration) ([]stock.Reservation, error) {
	res := make([]stock.Reservation, 0, len(lines))
	for i := range lines {
		r, err := a.admitWithin(ctx, lines[i:i+1], bound, heldWait)
		if err != nil {
			taken := slices.Clone(lines[:i])
			for j := range taken {
				taken[j].Reservation = res[j]
			}
			a.GiveBack(ctx, taken, errOtherLine)
			return nil, err
		}
		res = append(res, r[0])
	}
	return res, nil
}

// errOtherLine is why a line admitted for a checkout was given back: another line was refused.
var errOtherLine = fmt.Errorf("checkout refused for another of its lines: %w", ErrNotPlaced)

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

// request is one Admit asking Redis: its lines, the reservations they take, and its bound.
type request struct {
	lines []stock.OrderRequest
	res   []stock.Reservation
	bound int
}

// admit runs lua/admit.lua once for reqs, all of one set of products, and returns their lines'
// answers in order, warming the counters of products that have none first.
func (a *Ledger) admit(ctx context.Context, reqs []request) ([]int64, error) {
	products := reqs[0].lines
	keys := make([]string, 0, 4*len(products))
	for _, l := range products {
		keys = append(keys, KeysOf(l.SKU).all()...)
	}
	args := make([]any, 0, 1+len(reqs)*(3+2*len(products)))
	args = append(args, a.instance)
	for _, r := range reqs {
		args = append(args, r.lines[0].UserID, r.lines[0].IdempotencyKey, r.bound)
		for i, l := range r.lines {
			args = append(args, l.Quantity, r.res[i].ID)
		}
	}
	for warmed := false; ; warmed = true {
		codes, err := admitScript.Run(ctx, a.client, keys, args...).Int64Slice()
		if err == nil && len(codes) != len(reqs)*len(products) {
			err = fmt.Errorf("%d answers for %d lines", len(codes), len(reqs)*len(products))
		}
		if err != nil {
			if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errAdmitSlow) {
				return nil, ctx.Err()
			}
			a.Down("admission", err)
			return nil, fmt.Errorf("%w: %w", ErrRedisDown, err)
		}
		missing := false
		for i, l := range products { // the first request's: every request has a line of each
			if codes[i] != -1 {
				continue
			}
			if warmed {
				return nil, fmt.Errorf("admission %s: counter vanished right after warming: %w", l.SKU, ErrRedisDown)
			}
			if err := a.warm(ctx, l.SKU, "nx"); errors.Is(err, stock.ErrNotFound) {
				return nil, &stock.CheckoutError{SKUs: []string{l.SKU}, Err: err}
			} else if err != nil {
				return nil, err
			}
			missing = true
		}
		if !missing {
			a.calls.Observe(float64(len(reqs)))
			return codes, nil
		}
	}
}

// reservationID is a random id that tells one reservation of a buyer from a later one.
func reservationID() string {
	b := make([]byte, 9)
	_, _ = crand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// touch records that this instance admits orders for sku, so that its sweeper watches it;
// at most once a second, so the hot path only reads.
func (a *Ledger) touch(sku string) {
	now := a.opts.Clock()
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
	wrote, err := warmScript.Run(ctx, a.client, KeysOf(sku).all(), argsOf(buyers, mode, p.Stock)...).Int()
	if err != nil {
		a.Down("warm", err)
		return fmt.Errorf("warm %s: %w: %w", sku, ErrRedisDown, err)
	}
	if wrote == 1 {
		a.results.WithLabelValues("warmed").Inc()
	}
	return nil
}

// Admission in batches: with Options.Batch n, buyers who arrive while a call for their products
// is out go together in the next, up to n, each answered as if alone.

// errAdmitSlow ends a batch whose call outlived admitTimeout: the breaker's business, unlike a
// buyer who gave up.
var errAdmitSlow = errors.New("admission call took too long")

// admitTimeout bounds one call of a batch, which no buyer's context does.
const admitTimeout = 3 * time.Second

// inRound runs round, as a keyqueue's round, on the items taken, if any, with a context of its
// own: the buyer who started the batch must not cut its call off for the others.
func inRound[T any](round func(ctx context.Context, key string, items []T)) func(string, func() []T) {
	return func(key string, take func() []T) {
		if items := take(); len(items) > 0 {
			ctx, cancel := context.WithTimeoutCause(context.Background(), admitTimeout, errAdmitSlow)
			defer cancel()
			round(ctx, key, items)
		}
	}
}

// call is a request waiting for its batch's answer.
type call struct {
	request
	codes []int64
	err   error
	done  chan struct{}
}

// ask returns r's answers from lua/admit.lua, alone or in its products' next batch. Once asked,
// a request waits for the answer, so that no reservation it took is left untracked.
func (a *Ledger) ask(ctx context.Context, r request) ([]int64, error) {
	if a.opts.Batch <= 1 {
		return a.admit(ctx, []request{r})
	}
	skus := make([]string, len(r.lines))
	for i, l := range r.lines {
		skus[i] = l.SKU
	}
	c := &call{request: r, done: make(chan struct{})}
	if err := a.admits.Await(ctx, strings.Join(skus, "\x00"), c, c.done); err != nil {
		return nil, err
	}
	return c.codes, c.err
}

// admitRound is one admission call for the requests of one set of products waiting in the queue.
func (a *Ledger) admitRound(ctx context.Context, _ string, calls []*call) {
	reqs := make([]request, len(calls))
	for i, c := range calls {
		reqs[i] = c.request
	}
	codes, err := a.admit(ctx, reqs)
	n := len(reqs[0].lines)
	for i, c := range calls {
		if c.err = err; err == nil {
			c.codes = codes[i*n : (i+1)*n]
		}
		close(c.done)
	}
}
