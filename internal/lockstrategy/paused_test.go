package lockstrategy_test

import (
	"context"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// lockLoss is how a holder paused inside its section loses its lock. start builds the paused
// instance of cfg (hooks and all) and another one, and returns lose, which takes the lock from
// the paused holder once it is inside, and back, which ends the fault before the holder goes
// on. fenced: the lock's guard is a fence, which refuses the stale write as busy; else it is
// the version check, which has the holder read again.
type lockLoss struct {
	start  func(t *testing.T, sku string, cfg service.Config) (paused, other backendtest.Instance, lose, back func())
	fenced bool
}

// unhooked is cfg for the instance beside the paused one: the same, with no hook holding it.
func unhooked(cfg service.Config) service.Config {
	cfg.Hooks = lockstrategy.Hooks{}
	return cfg
}

// redisLockExpires: the Redis key's TTL runs out while the other instance waits for the lock.
var redisLockExpires = lockLoss{start: func(t *testing.T, _ string, cfg service.Config) (backendtest.Instance, backendtest.Instance, func(), func()) {
	cfg.LockTTL = 300 * time.Millisecond
	other := unhooked(cfg)
	cfg.LockExtend = time.Hour // the watchdog never runs: the holder is paused as a whole
	return backendtest.NewInstance(t, cfg, backendtest.Wiring{}), backendtest.NewInstance(t, other, backendtest.Wiring{}), func() {}, func() {}
}}

// etcdLeaseRevoked: the holder's lease is revoked, as its expiry would.
var etcdLeaseRevoked = lockLoss{fenced: true, start: func(t *testing.T, sku string, cfg service.Config) (backendtest.Instance, backendtest.Instance, func(), func()) {
	admin := backendtest.Etcd(t)
	lose := func() {
		ctx := context.Background()
		held, err := admin.Get(ctx, "/seckill/locks/"+sku, clientv3.WithPrefix())
		require.NoError(t, err)
		require.Len(t, held.Kvs, 1, "the paused instance holds the mutex")
		_, err = admin.Revoke(ctx, clientv3.LeaseID(held.Kvs[0].Lease))
		require.NoError(t, err)
	}
	return backendtest.NewInstance(t, cfg, backendtest.Wiring{}), backendtest.NewInstance(t, unhooked(cfg), backendtest.Wiring{}), lose, func() {}
}}

// zkSessionExpires: the holder is cut off from ZooKeeper past its session, whose node the server
// then deletes.
var zkSessionExpires = lockLoss{fenced: true, start: func(t *testing.T, sku string, cfg service.Config) (backendtest.Instance, backendtest.Instance, func(), func()) {
	servers := backendtest.ZooKeeperServers(t)
	proxy := backendtest.StartFaultProxy(t, servers[0])
	admin := zkSession(t)
	lose := func() {
		dir := "/seckill/locks/" + sku
		nodes, _, err := admin.Children(dir)
		require.NoError(t, err)
		require.Len(t, nodes, 1, "the paused instance holds the lock")
		proxy.Stop() // cut off from ZooKeeper: its session runs out on the server
		cutAt := time.Now()
		require.Eventually(t, func() bool {
			exists, _, err := admin.Exists(path.Join(dir, nodes[0]))
			return err == nil && !exists
		}, 10*time.Second, 20*time.Millisecond, "the server ended the session and deleted its node")
		t.Logf("lock node gone %s after the cut (session timeout %s)", time.Since(cutAt), cfg.LockTTL)
	}
	back := func() { require.NoError(t, proxy.Start()) }
	return backendtest.NewInstance(t, cfg, backendtest.Wiring{ZKServers: []string{proxy.Listen}}),
		backendtest.NewInstance(t, unhooked(cfg), backendtest.Wiring{ZKServers: servers}), lose, back
}}

// TestPausedHolderLosesItsLock is the failure every guard exists for, on each lock service: a
// holder inside its critical section, past its last check, loses its lock as a paused process
// does (GC, VM steal, SIGSTOP) — its TTL runs out with its watchdog unable to extend it (Redis),
// its lease is revoked (etcd), it is cut off from ZooKeeper longer than its session (pitfall
// two, 坑二, of «Locks in practice», docs/sources.md). Another instance is granted the lock and
// sells two units; only then does the paused holder write. Its guard refuses the stale write:
// the version check fails and it reads again, finding the last unit (hybrid), or the fence
// refuses it — busy, never a sale — and its retry, on a new session, sells the last unit (etcd,
// zookeeper). Nothing is sold twice.
func TestPausedHolderLosesItsLock(t *testing.T) {
	for _, v := range strategies() {
		if v.losesLock == nil {
			continue
		}
		c := *v.losesLock
		t.Run(v.name, func(t *testing.T) {
			strategy := v.cfg.Strategy
			s, sku := onSale(t, 3)
			hooks, inside, release := backendtest.HoldSection("slow")
			defer release()
			cfg := v.cfg
			cfg.Hooks = hooks
			paused, other, lose, back := c.start(t, sku, cfg)
			order := func(user string) stock.OrderRequest {
				return stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: strategy}
			}
			type result struct {
				order stock.Order
				err   error
			}
			slow := make(chan result, 1)
			go func() {
				o, err := place(paused, order("slow"))
				slow <- result{o, err}
			}()
			<-inside
			lose()
			var acked []stock.Order
			for _, user := range []string{"fast-1", "fast-2"} {
				o, err := placeRetrying(t, other, order(user), 10*time.Second)
				require.NoError(t, err, "the lock passed to the other instance")
				acked = append(acked, o)
			}
			back()
			release() // the lock has passed: another instance held it and sold behind the paused holder
			r := <-slow
			if c.fenced {
				assert.ErrorIs(t, r.err, stock.ErrFencedOut, "the old holder's write was fenced out")
				assert.ErrorIs(t, r.err, stock.ErrBusy, "and the client hears busy, to retry")
				assert.EqualValues(t, 1, backendtest.Counter(t, "seckill_fenced_out_total", map[string]string{"strategy": strategy}, paused))
				r.order, r.err = placeRetrying(t, paused, order("slow"), 10*time.Second)
				require.NoError(t, r.err, "the retry runs on a new session")
				if strategy == "etcd" {
					assert.EqualValues(t, 2, backendtest.Counter(t, "seckill_etcd_sessions_total", nil, paused))
				}
			} else {
				require.NoError(t, r.err, "the paused writer retried with a fresh read and found the last unit")
				assert.GreaterOrEqual(t, backendtest.Counter(t, "seckill_optimistic_retries_total", nil, paused), 1.0,
					"the paused writer's version check failed")
				assert.GreaterOrEqual(t, backendtest.Counter(t, "seckill_lock_lost_total", nil, paused), 1.0,
					"the paused writer found its lock gone at release")
			}
			acked = append(acked, r.order)
			a := backendtest.RequireInvariant(t, s, sku, acked)
			assert.Zero(t, a.Stock)
		})
	}
}
