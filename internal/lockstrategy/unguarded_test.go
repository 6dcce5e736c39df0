package lockstrategy_test

import (
	"context"
	"path"
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

// lockFamily is one lock service with its guarded strategy and its unguarded twin, and how a
// holder comes to lose its lock while it is inside its section.
type lockFamily struct {
	guarded, unguarded string
	// paused tunes the holder's instance: what makes its lock run out under it.
	paused func(cfg *service.Config)
	// lose takes the lock of sku from its holder, as expiry does, once the holder is inside.
	lose func(t *testing.T, sku string)
}

func lockFamilies() []lockFamily {
	return []lockFamily{
		{guarded: "hybrid", unguarded: "unguarded-redis",
			// The whole holder is paused, its watchdog with it: the lock expires after its TTL,
			// and the next instance's wait outlasts it.
			paused: func(cfg *service.Config) { cfg.LockTTL, cfg.LockExtend = 300*time.Millisecond, time.Hour },
			lose:   func(*testing.T, string) {}},
		{guarded: "etcd", unguarded: "unguarded-etcd",
			lose: func(t *testing.T, sku string) {
				ctx := context.Background()
				admin := backendtest.Etcd(t)
				held, err := admin.Get(ctx, "/seckill/locks/"+sku, clientv3.WithPrefix())
				require.NoError(t, err)
				require.Len(t, held.Kvs, 1, "the paused instance holds the mutex")
				_, err = admin.Revoke(ctx, clientv3.LeaseID(held.Kvs[0].Lease)) // as its expiry would
				require.NoError(t, err)
			}},
		{guarded: "zookeeper", unguarded: "unguarded-zookeeper",
			lose: func(t *testing.T, sku string) {
				admin := zkSession(t)
				dir := "/seckill/locks/" + sku
				nodes, _, err := admin.Children(dir)
				require.NoError(t, err)
				require.Len(t, nodes, 1, "the paused instance holds the lock")
				require.NoError(t, admin.Delete(path.Join(dir, nodes[0]), -1)) // as its session's expiry would
			}},
	}
}

// TestUnguardedOversells is the oversell that opens «Locks in practice» (docs/sources.md; NoGuard, guard.go) on each lock
// service, beside the guard that stops it. A holder has read the product (2 units) and is paused inside its section; its
// lock runs out (the Redis key expires, the etcd lease is revoked, the ZooKeeper node goes);
// another instance is granted the lock and sells a unit. The holder wakes and writes:
//   - guarded (version, fence): its write is refused, and nothing is oversold;
//   - unguarded: it writes the stock computed from its read — 2 - 1, over the other's sale — and
//     the next buyer is sold a unit that is not there. The audit and RequireInvariant see it.
func TestUnguardedOversells(t *testing.T) {
	for _, f := range lockFamilies() {
		for _, strategy := range []string{f.guarded, f.unguarded} {
			t.Run(strategy, func(t *testing.T) {
				s, sku := onSale(t, 2)
				buy := func(inst backendtest.Instance, user string) (stock.Order, error) {
					return place(inst, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: strategy})
				}
				cfg := config(strategy)
				cfg.AllowUnsafe = true
				w := backendtest.Wiring{ZKServers: backendtest.ZooKeeperServers(t)}
				other := backendtest.NewInstance(t, cfg, w)
				reached, resume := make(chan struct{}), make(chan struct{})
				var once sync.Once
				cfg.Hooks.InSection = func(_ context.Context, orders []stock.OrderRequest) {
					if orders[0].UserID == "slow" {
						once.Do(func() { close(reached); <-resume })
					}
				}
				if f.paused != nil {
					f.paused(&cfg)
				}
				paused := backendtest.NewInstance(t, cfg, w)

				type result struct {
					order stock.Order
					err   error
				}
				slow := make(chan result, 1)
				go func() {
					o, err := buy(paused, "slow")
					slow <- result{o, err}
				}()
				<-reached
				f.lose(t, sku)
				fast, err := placeRetrying(t, other, stock.OrderRequest{SKU: sku, UserID: "fast", Quantity: 1, Strategy: strategy}, 5*time.Second)
				require.NoError(t, err, "the lock passed to the other instance once the holder lost it")
				close(resume)
				r := <-slow
				late, lateErr := buy(other, "late")

				acked := []stock.Order{fast}
				for _, o := range []result{r, {late, lateErr}} {
					if o.err == nil {
						acked = append(acked, o.order)
					}
				}
				a, err := s.Audit(context.Background(), sku)
				require.NoError(t, err)
				t.Logf("%s: holder %v, late buyer %v; audit stock %d, %d ordered of %d", strategy, r.err, lateErr, a.Stock, a.OrderedQuantity, a.InitialStock)
				if strategy == f.guarded {
					// The holder's write was refused: fenced out (busy), or a version conflict
					// and a fresh read that found the unit left.
					assert.Len(t, acked, 2, "two units, two sales")
					backendtest.RequireInvariant(t, s, sku, acked)
					return
				}
				require.NoError(t, r.err, "the unguarded holder wrote the stock it computed, over the other's sale")
				require.NoError(t, lateErr, "the next buyer was sold a unit the lost update put back")
				assert.EqualValues(t, 1, a.Oversold(), "three units sold of two")
				assert.False(t, a.Consistent())
				requireInvariantFails(t, s, sku, acked)
			})
		}
	}
}
