package lockstrategy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/flashsale/seckill/internal/backendtest"
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
