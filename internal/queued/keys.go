package queued

import (
	"context"
	"fmt"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// keysUnused refuses before their 202, units given back, the admitted requests es whose
// Idempotency-Key a written order carries (the writer's insert would refuse them only after),
// and returns the others: one read per batch. If the database cannot answer, the insert decides.
func (s *Queued) keysUnused(ctx context.Context, es []*entry) []*entry {
	var keys []string
	for _, e := range es {
		if e.req.IdempotencyKey != "" {
			keys = append(keys, e.req.IdempotencyKey)
		}
	}
	if len(keys) == 0 || planted.On(planted.UnreadKey) {
		return es
	}
	used, err := s.store.KeysUsed(ctx, keys)
	if err != nil {
		s.log.Debug("idempotency keys not checked before the 202; the writer's insert decides", "err", err)
		return es
	}
	var unused []*entry
	for _, e := range es {
		key := e.req.IdempotencyKey
		if prior := used[key]; key != "" && prior != "" {
			err := fmt.Errorf("key %q already used by order %s: %w", key, prior, stock.ErrDuplicateRequest)
			s.refuse(ctx, []*entry{e}, fmt.Errorf("%w: %w", admission.ErrNotPlaced, err), err)
			continue
		}
		unused = append(unused, e)
	}
	return unused
}
