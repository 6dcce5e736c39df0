package queued

import (
	"context"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/keyqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// keyCheck is one admitted order's question to the database: does a written order carry its
// Idempotency-Key?
type keyCheck struct {
	key   string
	prior string // the written order that carries it; "" when none
	err   error
	done  chan struct{}
}

// keysPerRead bounds the keys one read asks about.
const keysPerRead = 256

// newKeyChecks returns the queue through which the keys of concurrent orders are read together:
// the orders admitted while one read runs wait for the next, which asks about all of them. A
// read has budget, on no buyer's context: the buyer that started it must not cut off the others'.
func newKeyChecks(store *stock.Store, budget time.Duration) *keyqueue.Queue[*keyCheck] {
	return keyqueue.New(keysPerRead, func(_ string, take func() []*keyCheck) {
		checks := take()
		if len(checks) == 0 {
			return
		}
		keys := make([]string, len(checks))
		for i, c := range checks {
			keys[i] = c.key
		}
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		used, err := store.KeysUsed(ctx, keys)
		cancel()
		for _, c := range checks {
			c.prior, c.err = used[c.key], err
			close(c.done)
		}
	})
}

// keyUnused refuses an order whose Idempotency-Key a written order already carries, before it is
// accepted: the writer's insert would refuse it only after the 202. The service then answers that
// order (a replay) or idempotency_conflict (another buyer's key). Only admitted orders pay the
// read, so the crowd that admission turns away costs none, and the orders admitted together
// share one. A database that cannot answer does not stop the sale: the writer's unique key still
// decides (refusal).
func (s *Queued) keyUnused(ctx context.Context, key string) error {
	if key == "" || planted.On(planted.UnreadKey) {
		return nil
	}
	c := &keyCheck{key: key, done: make(chan struct{})}
	err := s.keys.Await(ctx, "", c, c.done)
	if err == nil {
		err = c.err
	}
	switch {
	case err != nil:
		s.log.Debug("idempotency key not checked before the 202; the writer's insert decides", "key", key, "err", err)
		return nil
	case c.prior == "":
		return nil
	}
	return fmt.Errorf("key %q already used by order %s: %w", key, c.prior, stock.ErrDuplicateRequest)
}
