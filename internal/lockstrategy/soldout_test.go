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

// readFirst are the strategies with no admission in front of their lock: a section of theirs
// reads its product before it takes the lock, and answers a sold-out one without it.
var readFirst = []string{"etcd", "zookeeper", "dblock", "pessimistic"}

// TestSoldOutTakesNoLock sells the one unit of a product under each strategy of readFirst, then
// asks for another, before any local sold-out flag knows the product: sold_out, answered from a
// read of the row with no lock waited for (seckill_lock_wait_seconds counts none). A sold-out
// answer needs no lock, and the buyers after the last unit — most of a flash sale's requests —
// must not queue for one (on Galera: TestGaleraSoldOutTakesNoLock).
func TestSoldOutTakesNoLock(t *testing.T) {
	for _, name := range readFirst {
		t.Run(name, func(t *testing.T) {
			inst := newInstances(t, 1, config(name), backendtest.Wiring{})[0]
			_, sku := onSale(t, 1)
			first, late := req(sku, "first"), req(sku, "late")
			first.Strategy, late.Strategy = name, name
			_, err := placeRetrying(t, inst, first, 10*time.Second)
			require.NoError(t, err)
			waited, _ := backendtest.Histogram(t, "seckill_lock_wait_seconds", inst)
			_, _, err = inst.PlaceOrder(context.Background(), late)
			assert.ErrorIs(t, err, stock.ErrSoldOut)
			after, _ := backendtest.Histogram(t, "seckill_lock_wait_seconds", inst)
			assert.Equal(t, waited, after, "the sold-out answer took no lock")
		})
	}
}
