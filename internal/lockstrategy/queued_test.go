package lockstrategy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// The queued pipeline's own tests are in internal/queued; its sale stays here, in the shared
// suite whose buyers and checks it runs.

// TestQueuedSale is the shared suite's sale under the queued strategy: 200 buyers on 3 instances
// against 50 units hear 202 exactly 50 times (admission answers the rest sold_out, never
// queued), every 202 ends placed — by writers on any instance — and the invariant holds.
func TestQueuedSale(t *testing.T) {
	for _, v := range bothWays("queued") {
		t.Run(v.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			insts := newInstances(t, instances, v.cfg, backendtest.Wiring{})
			res := sellOn(t, insts, sku, units, buyers, fault{})
			t.Logf("%s on %s: outcomes %v after %d busy retries", v.name, backendtest.Dialect(t), res.outcome, res.retries)
			assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
			for _, o := range res.acked {
				assert.Equal(t, stock.Queued, o.Status, "a queued order is answered queued")
			}
			placed, rejected := backendtest.Ended(t, insts, res.acked, 10*time.Second)
			assert.Empty(t, rejected)
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
			assert.Zero(t, a.Stock)
			assertLinearizable(t, units, res)
			audit, err := insts[0].Audit(context.Background(), sku)
			require.NoError(t, err)
			require.NotNil(t, audit.Queued)
			assert.Zero(t, *audit.Queued, "nothing left in the queue")
			writers := 0
			for _, inst := range insts {
				if backendtest.Counter(t, "seckill_queue_orders_total", map[string]string{"event": "placed"}, inst) > 0 {
					writers++
				}
			}
			t.Logf("orders placed by the writers of %d of %d instances", writers, len(insts))
		})
	}
}
