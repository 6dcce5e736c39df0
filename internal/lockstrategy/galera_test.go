package lockstrategy_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// galeraStrategies are the strategies that run on a Galera cluster, each as the suite's table has
// it; zookeeper's lock and fence are etcd's in shape.
func galeraStrategies() []variant {
	var out []variant
	for _, v := range strategies() {
		if slices.Contains([]string{"hybrid", "pessimistic", "dblock", "etcd", "queued"}, v.name) {
			out = append(out, v)
		}
	}
	return out
}

// TestGaleraStrategies is the shared suite on a three-node MariaDB Galera cluster, each instance
// on a node of its own. No lock the database takes reaches past its node there: two nodes grant
// the same row lock (FOR UPDATE NOWAIT), the same lock-table row, the same version — and the
// later COMMIT fails certification (1213), which every strategy already answers as a retry or
// busy. Exactly the stock sells, the rest hear sold_out, the history fits one product's stock,
// and every node holds the same sale. The conflicts the cluster counted are logged.
func TestGaleraStrategies(t *testing.T) {
	t.Parallel() // servers of its own: beside the other cluster tests, after the rest
	g := backendtest.GaleraCluster(t)
	for _, v := range galeraStrategies() {
		t.Run(v.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			insts := g.Instances(t, v.cfg, backendtest.Wiring{})
			before := g.Conflicts(t)
			start := time.Now()
			res := sellOn(t, insts, sku, units, buyers, fault{})
			took := time.Since(start)
			cert, bf := g.Conflicts(t).Since(before)
			t.Logf("%s on Galera, an instance per node: outcomes %v after %d busy retries in %s; the cluster counted %d certification failures and %d brute-force aborts",
				v.name, res.outcome, res.retries, took.Round(time.Millisecond), cert, bf)
			assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
			a := backendtest.RequireInvariant(t, g.Store(t, 1), sku, ended(t, v, insts, sku, res.acked))
			assert.Zero(t, a.Stock)
			assert.Equal(t, a, g.RequireAgree(t, sku))
			assertLinearizable(t, units, res)
		})
	}
}

// TestGaleraSoldOutTakesNoLock sells out a product under dblock on the three-node cluster, an
// instance per node, then sends a crowd of late buyers to every node at once, each asking once:
// every answer is sold_out — none busy, as two nodes writing the lock table's row at once would
// be at COMMIT (certification, 1213) — and no instance waited for a lock: the answer comes from
// a read of the row (stock.Store.SoldOut).
func TestGaleraSoldOutTakesNoLock(t *testing.T) {
	t.Parallel() // servers of its own: beside the other cluster tests, after the rest
	g := backendtest.GaleraCluster(t)
	insts := g.Instances(t, config("dblock"), backendtest.Wiring{})
	sku := backendtest.SKU(t)
	_, err := g.Store(t, 0).PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 3, MaxPerOrder: 1})
	require.NoError(t, err)
	var acked []stock.Order
	for i := range 3 {
		r := req(sku, fmt.Sprintf("first-%d", i))
		r.Strategy = "dblock"
		o, err := placeRetrying(t, insts[i], r, 10*time.Second)
		require.NoError(t, err)
		acked = append(acked, o)
	}
	waited, _ := backendtest.Histogram(t, "seckill_lock_wait_seconds", insts...)
	const late = 60
	answers := make([]string, late)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range late {
		wg.Go(func() {
			r := req(sku, fmt.Sprintf("late-%d", i))
			r.Strategy = "dblock"
			<-start
			_, _, err := insts[i%len(insts)].PlaceOrder(context.Background(), r)
			answers[i] = stock.Code(err)
		})
	}
	close(start)
	wg.Wait()
	outcomes := map[string]int{}
	for _, a := range answers {
		outcomes[a]++
	}
	assert.Equal(t, map[string]int{"sold_out": late}, outcomes, "every late buyer heard sold_out, at once")
	after, _ := backendtest.Histogram(t, "seckill_lock_wait_seconds", insts...)
	assert.Equal(t, waited, after, "a sold-out answer took no lock")
	backendtest.RequireInvariant(t, g.Store(t, 1), sku, acked)
}
