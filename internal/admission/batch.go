package admission

import (
	"context"
	"errors"
	"time"
)

// Admission in batches. Every buyer of a hot product asks Redis the same question of the same
// keys, and under load most of an instance's buyers of a product arrive while an earlier call for
// it is out. With Options.Batch n, those wait for it and then go together: one script call for up to n
// buyers, each answered exactly as if it had asked alone, in order (lua/admit.lua), so the ledger
// is the same and Redis runs one script where it ran n. A buyer who comes to an idle product
// goes at once, alone: a batch forms only where buyers pile up, and none waits for more than the
// call before its own.

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
