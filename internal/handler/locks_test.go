package handler_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
)

func locksPath(sku string) string { return "/api/v1/products/" + sku + "/locks" }

// TestLocks: GET .../locks names, for every strategy of the instance that takes a named lock,
// its backend and its key for the SKU, and the SKU's admission keys — for a SKU with no product
// too, since they are names. Whether the names are the keys the strategies really take is
// service's TestLocks; this is the contract's shape.
func TestLocks(t *testing.T) {
	cfg := service.Defaults()
	cfg.AllowUnsafe = true
	s := newServerOn(t, cfg, backendtest.Wiring{ZKServers: backendtest.ZooKeeperServers(t)})
	sku := backendtest.SKU(t)

	got := decode[contract.Locks](t, s.do(t, http.MethodGet, locksPath(sku), "", admin), http.StatusOK,
		[]string{"sku", "locks", "admission"})
	assert.Equal(t, sku, got.SKU)
	backends := map[string]string{}
	for _, l := range got.Locks {
		backends[l.Strategy] = l.Backend
		assert.Contains(t, l.Key, sku, "%s's key names the SKU", l.Strategy)
	}
	want := map[string]string{"hybrid": "redis", "unguarded-redis": "redis", "etcd": "etcd", "unguarded-etcd": "etcd",
		"zookeeper": "zookeeper", "unguarded-zookeeper": "zookeeper", "dblock": "database"}
	assert.Equal(t, want, backends, "every strategy with a named lock, and no other (pessimistic, naive)")
	for _, k := range []string{got.Admission.Stock, got.Admission.Buyers, got.Admission.Reserved, got.Admission.Queued} {
		assert.True(t, strings.HasPrefix(k, "seckill:{"+sku+"}:"), "admission key %q is in the SKU's hash slot", k)
	}

	assertError(t, s.do(t, http.MethodGet, locksPath("no/such"), "", admin), http.StatusNotFound, "not_found")
	assertError(t, s.do(t, http.MethodGet, locksPath(strings.Repeat("x", 65)), "", admin), http.StatusBadRequest, "invalid_argument")
}
