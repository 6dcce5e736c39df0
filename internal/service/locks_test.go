package service_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// TestLocks: the lock each strategy names (Service.Locks) is the lock it takes. Inside every
// strategy's critical section, the named key is looked up in its backend and must be there —
// and once the order is placed, gone: a strategy that locked under another name than it
// publishes (a key renamed in one place and not the other) would fail here, where the load
// tool's -fault lock-loss, deleting the published key, would otherwise test nothing.
func TestLocks(t *testing.T) {
	ctx := context.Background()
	zkServers := backendtest.ZooKeeperServers(t)
	rdb, etcd, db := backendtest.Redis(t), backendtest.Etcd(t), backendtest.SQL(t)
	zkConn := backendtest.ZooKeeper(t, zkServers, 2*time.Second)
	// held looks the key of a lock up in its backend.
	held := func(ctx context.Context, l service.LockKey) (bool, error) {
		switch l.Backend {
		case "redis":
			n, err := rdb.Exists(ctx, l.Key).Result()
			return n == 1, err
		case "etcd":
			r, err := etcd.Get(ctx, l.Key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return false, err
			}
			return r.Count > 0, nil
		case "zookeeper":
			children, _, err := zkConn.Children(l.Key)
			return len(children) > 0, err
		case "database":
			var n int
			err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM distributed_locks WHERE lock_name = ?", l.Key).Scan(&n)
			return n > 0, err
		}
		return false, fmt.Errorf("unknown backend %q", l.Backend)
	}

	var (
		mu      sync.Mutex
		byName  map[string]service.LockKey
		inside  = map[string]bool{}
		lookErr error
	)
	cfg := service.Defaults()
	cfg.AllowUnsafe = true
	cfg.Hooks.InSection = func(ctx context.Context, orders []stock.OrderRequest) {
		mu.Lock()
		defer mu.Unlock()
		l, ok := byName[orders[0].Strategy]
		if !ok {
			return // pessimistic, naive: no named lock
		}
		ok, err := held(ctx, l)
		inside[l.Strategy], lookErr = ok, errors.Join(lookErr, err)
	}
	inst := backendtest.NewInstance(t, cfg, backendtest.Wiring{ZKServers: zkServers})
	sku := backendtest.SKU(t)
	locks := inst.Locks(sku)
	mu.Lock()
	byName = map[string]service.LockKey{}
	for _, l := range locks.Locks {
		byName[l.Strategy] = l
	}
	mu.Unlock()
	require.ElementsMatch(t, []string{"dblock", "etcd", "hybrid", "unguarded-etcd", "unguarded-redis", "unguarded-zookeeper", "zookeeper"},
		slices.Collect(maps.Keys(byName)), "every strategy with a named lock is published")

	_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: int64(len(locks.Locks)), MaxPerOrder: 1})
	require.NoError(t, err)
	for _, l := range locks.Locks {
		_, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-" + l.Strategy, Quantity: 1, Strategy: l.Strategy})
		require.NoError(t, err, l.Strategy)
		mu.Lock()
		assert.True(t, inside[l.Strategy], "%s: its published key %s is held in %s inside its section", l.Strategy, l.Key, l.Backend)
		mu.Unlock()
		after, err := held(ctx, l)
		require.NoError(t, err)
		assert.False(t, after, "%s: %s released once the order is placed", l.Strategy, l.Key)
	}
	require.NoError(t, lookErr)
	assert.Equal(t, "seckill:{"+sku+"}:stock", locks.Admission.Stock)
	n, err := rdb.Exists(ctx, locks.Admission.Stock, locks.Admission.Buyers).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "hybrid's admission counted down and recorded its buyer under the published keys")
}
