package lockstrategy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

// redisModes are the one-lock-store Redis deployments beyond one server, each started fresh.
func redisModes() []struct {
	name  string
	start func(t *testing.T) backendtest.Wiring
} {
	return []struct {
		name  string
		start func(t *testing.T) backendtest.Wiring
	}{
		{"cluster", func(t *testing.T) backendtest.Wiring {
			c := backendtest.StartRedisCluster(t)
			return backendtest.Wiring{RedisMode: redisclient.Cluster, RedisAddrs: c.Addrs()}
		}},
		{"sentinel", func(t *testing.T) backendtest.Wiring {
			s := backendtest.StartRedisSentinel(t)
			return backendtest.Wiring{RedisMode: redisclient.Sentinel, RedisAddrs: s.SentinelAddrs(), RedisMaster: s.Name}
		}},
	}
}

// TestRedisModes is the shared suite under hybrid, both ways, on a six-node Redis Cluster and on
// a Sentinel-managed master: admission's scripts, the lock, release messages and the audit's
// view of Redis all work there — every order was admitted by Redis (no fallback), exactly the
// stock sells across three instances, and Redis ends holding nothing back.
func TestRedisModes(t *testing.T) {
	for _, m := range redisModes() {
		t.Run(m.name, func(t *testing.T) {
			w := m.start(t)
			for _, v := range (capabilities{strategy: "hybrid"}).bothWays() {
				t.Run(v.name, func(t *testing.T) {
					insts := newInstances(t, instances, v.cfg, w)
					sku := backendtest.SKU(t)
					res := sellOn(t, insts, sku, units, buyers, fault{})
					t.Logf("hybrid on redis %s, %s: outcomes %v after %d busy retries", m.name, v.name, res.outcome, res.retries)
					assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
					assert.Zero(t, backendtest.Counter(t, "seckill_redis_fallbacks_total", nil, insts...), "Redis answered every order")
					backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
					assertLinearizable(t, units, res)
					a, err := insts[1].Audit(context.Background(), sku)
					require.NoError(t, err)
					require.NotNil(t, a.Redis, "the audit reads admission from the %s", m.name)
					require.NotNil(t, a.Redis.Stock)
					assert.Zero(t, *a.Redis.Stock)
					assert.Zero(t, a.HeldBack(), "Redis holds nothing back")
					for _, c := range insts[2].Checks() {
						assert.NoError(t, c.Ping(context.Background()), "readiness: %s", c.Name)
					}
				})
			}
		})
	}
}

// TestRedisClusterPubSub: a message published through a Cluster client reaches a subscriber on
// every node — Redis Cluster forwards PUBLISH over its bus — so a release message or a sold-out
// reset reaches every instance, whichever node its subscription landed on.
func TestRedisClusterPubSub(t *testing.T) {
	ctx := context.Background()
	c := backendtest.StartRedisCluster(t)
	var subs []*redis.PubSub
	for _, n := range c.Nodes {
		rdb := n.Client()
		t.Cleanup(func() { _ = rdb.Close() })
		ps := rdb.Subscribe(ctx, "seckill:locks:released", "seckill:products:reset")
		for range 2 { // the subscriptions' confirmations
			_, err := ps.Receive(ctx)
			require.NoError(t, err)
		}
		t.Cleanup(func() { _ = ps.Close() })
		subs = append(subs, ps)
	}
	cc := c.Client()
	t.Cleanup(func() { _ = cc.Close() })
	for _, channel := range []string{"seckill:locks:released", "seckill:products:reset"} {
		require.NoError(t, cc.Publish(ctx, channel, "sku-1").Err())
		for i, ps := range subs {
			msg, err := ps.ReceiveTimeout(ctx, 2*time.Second)
			require.NoError(t, err, "node %d", i)
			m, ok := msg.(*redis.Message)
			require.True(t, ok, "node %d: %T", i, msg)
			assert.Equal(t, channel, m.Channel)
			assert.Equal(t, "sku-1", m.Payload)
		}
	}
}

// redisClusterMasterKilled SIGKILLs the master of the sale's slot mid-sale; the Cluster
// promotes its replica. Until then that slot answers nothing — orders take the database-guarded
// path — and after it the replica holds what had reached it: maybe the lock, maybe not (a lock
// lost this way lets a second holder in, which the version check turns away). Exactly the stock
// sells, none is stranded, and the history fits one product's stock.
var redisClusterMasterKilled = memberLoss{name: "cluster-master-killed", what: "the master of the sale's slot SIGKILLed",
	start: func(t *testing.T, sku string) (backendtest.Wiring, func()) {
		c := backendtest.StartRedisCluster(t)
		return backendtest.Wiring{RedisMode: redisclient.Cluster, RedisAddrs: c.Addrs()}, func() {
			ctx := context.Background()
			m, err := c.MasterOf(ctx, "{"+sku+"}")
			if !assert.NoError(t, err) {
				return
			}
			killed := time.Now()
			m.Kill()
			promoted, err := c.WaitMaster(ctx, "{"+sku+"}", 20*time.Second)
			if assert.NoError(t, err) {
				assert.NotEqual(t, m.Addr(), promoted.Addr(), "a replica took the slot")
			}
			assert.NoError(t, c.WaitOK(ctx, 20*time.Second))
			t.Logf("master %s killed; a replica served its slots after %s", m.Addr(), time.Since(killed).Round(time.Millisecond))
		}
	}}

// redisSentinelMasterKilled SIGKILLs the master mid-sale; the Sentinels promote the replica and
// the instances' clients follow it. The same promises as for the Cluster hold.
var redisSentinelMasterKilled = memberLoss{name: "sentinel-master-killed", what: "the master SIGKILLed",
	start: func(t *testing.T, _ string) (backendtest.Wiring, func()) {
		s := backendtest.StartRedisSentinel(t)
		return backendtest.Wiring{RedisMode: redisclient.Sentinel, RedisAddrs: s.SentinelAddrs(), RedisMaster: s.Name}, func() {
			killed := time.Now()
			s.Master.Kill()
			assert.NoError(t, s.WaitPromoted(context.Background(), 30*time.Second))
			t.Logf("master %s killed; the Sentinels named the replica after %s", s.Master.Addr(), time.Since(killed).Round(time.Millisecond))
		}
	}}

// TestRedisClusterManySKUs sells 300 SKUs at once on the Cluster — their keys spread over the
// three masters' slots — beside the same sale on one Redis, and logs both rates: every SKU sells
// exactly its stock, and each master holds a share of the sale's keys.
func TestRedisClusterManySKUs(t *testing.T) {
	t.Parallel() // servers of its own: beside the other cluster tests, after the rest
	const skus, unitsEach, buyersEach, workers = 300, 2, 3, 64
	c := backendtest.StartRedisCluster(t)
	single := backendtest.StartRedis(t)
	rates := map[string]float64{}
	for _, m := range []struct {
		name string
		w    backendtest.Wiring
	}{
		{"cluster", backendtest.Wiring{RedisMode: redisclient.Cluster, RedisAddrs: c.Addrs()}},
		{"single", backendtest.Wiring{RedisAddrs: []string{single.Addr}}},
	} {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			insts := newInstances(t, instances, config("hybrid"), m.w)
			base, store := backendtest.SKU(t), backendtest.Store(t)
			names := make([]string, skus)
			for i := range names {
				names[i] = fmt.Sprintf("%s-%04d", base, i)
				t.Cleanup(func() { _ = store.DeleteProduct(context.Background(), names[i]) })
				_, err := insts[i%instances].PutProduct(ctx, stock.ProductSpec{SKU: names[i], Name: "many", Stock: unitsEach, MaxPerOrder: 1})
				require.NoError(t, err)
			}
			type job struct{ sku, user string }
			jobs := make(chan job)
			var (
				mu      sync.Mutex
				acked   = map[string][]stock.Order{}
				outcome = map[string]int{}
				wg      sync.WaitGroup
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range jobs {
						o, err := placeRetrying(t, insts[w%instances], stock.OrderRequest{SKU: j.sku, UserID: j.user, Quantity: 1, Strategy: "hybrid"}, 30*time.Second)
						mu.Lock()
						outcome[stock.Code(err)]++
						if err == nil {
							acked[j.sku] = append(acked[j.sku], o)
						}
						mu.Unlock()
					}
				}()
			}
			began := time.Now()
			for b := range buyersEach {
				for _, sku := range names {
					jobs <- job{sku, fmt.Sprintf("u%d", b)}
				}
			}
			close(jobs)
			wg.Wait()
			took := time.Since(began)
			rates[m.name] = float64(skus*buyersEach) / took.Seconds()
			t.Logf("%d SKUs on redis %s: %d orders in %s, %.0f answers/s; outcomes %v", skus, m.name, skus*unitsEach, took.Round(time.Millisecond), rates[m.name], outcome)
			assert.Equal(t, map[string]int{"ok": skus * unitsEach, "sold_out": skus * (buyersEach - unitsEach)}, outcome)
			for _, sku := range names {
				backendtest.RequireInvariant(t, store, sku, acked[sku])
			}
			if m.name == "cluster" {
				perMaster := map[string]int64{}
				var total int64
				for _, n := range c.Nodes {
					rdb := n.Client()
					role, err := rdb.Do(ctx, "ROLE").Slice()
					require.NoError(t, err)
					keys, err := rdb.DBSize(ctx).Result()
					require.NoError(t, err)
					_ = rdb.Close()
					if role[0] == "master" {
						perMaster[n.Addr()] = keys
						total += keys
					}
				}
				t.Logf("the sale's keys per master: %v", perMaster)
				require.Len(t, perMaster, 3)
				for addr, keys := range perMaster {
					assert.Greater(t, keys, total/5, "master %s holds a share of the sale's keys", addr)
				}
			}
		})
	}
	if len(rates) == 2 {
		t.Logf("%d SKUs: cluster / single = %.2f", skus, rates["cluster"]/rates["single"])
	}
}
