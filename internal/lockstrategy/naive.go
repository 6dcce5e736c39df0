package lockstrategy

import (
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// NewNaive returns the naive strategy: no lock, no guard; read, check, write the stock computed
// from the read. Unsafe on purpose, it shows that the checks see overselling: a check that never
// fails proves nothing. pause, between read and write, stands in for production's latency.
func NewNaive(store *stock.Store, pause time.Duration, opts Options, metrics *LockMetrics) *Naive {
	opts.Wait = pause
	r := newRunner("naive", store, nil, NoGuard, opts, metrics)
	r.pause = pause
	n := &Naive{batched{run: r, batch: newBatcher(r, r.section)}}
	n.batch.overlap = true
	return n
}

// Naive is the runner with no lock and no guard (NewNaive).
type Naive struct{ batched }
