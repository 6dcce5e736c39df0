package lockstrategy_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/stock"
)

// samples gathers the metrics of the family name whose labels include labels.
func samples(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue metrics
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// counter sums the samples of a counter family whose labels include labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, m := range samples(t, reg, name, labels) {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

func req(sku, user string) stock.OrderRequest {
	return stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "hybrid"}
}

// redisStock reads the admission counter of sku straight from Redis.
func redisStock(t *testing.T, c *redis.Client, sku string) (int64, bool) {
	t.Helper()
	n, err := c.Get(context.Background(), "seckill:{"+sku+"}:stock").Int64()
	if err == redis.Nil {
		return 0, false
	}
	require.NoError(t, err)
	return n, true
}

var defaultHybrid = lockstrategy.HybridOptions{TTL: 10 * time.Second, Wait: 2 * time.Second, Attempts: 5}

// TestHybridAdmission: once Redis knows the product is sold out, or that a user has bought, the
// answer comes from admission — the lock and the database are not asked.
func TestHybridAdmission(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 2)
	rdb := backendtest.Redis(t)
	h, reg := newHybridWithMetrics(t, s, defaultHybrid, rdb)

	a, err := h.PlaceOrder(ctx, req(sku, "u1"))
	require.NoError(t, err)
	assert.EqualValues(t, 1, counter(t, reg, "seckill_admission_total", map[string]string{"result": "warmed"}), "the first order warms the counter")
	_, err = h.PlaceOrder(ctx, req(sku, "u1"))
	assert.ErrorIs(t, err, stock.ErrAlreadyPurchased)
	b, err := h.PlaceOrder(ctx, req(sku, "u2"))
	require.NoError(t, err)
	for _, user := range []string{"u3", "u4", "u5"} {
		_, err = h.PlaceOrder(ctx, req(sku, user))
		assert.ErrorIs(t, err, stock.ErrSoldOut)
	}
	assert.EqualValues(t, 3, counter(t, reg, "seckill_admission_total", map[string]string{"result": "sold_out"}),
		"every sold-out answer came from Redis")
	assert.EqualValues(t, 1, counter(t, reg, "seckill_admission_total", map[string]string{"result": "already_purchased"}))
	n, ok := redisStock(t, rdb, sku)
	require.True(t, ok)
	assert.Zero(t, n)
	backendtest.RequireInvariant(t, s, sku, []stock.Order{a, b})
}

// TestHybridGiveBack: an admitted order that the database refuses gives its pre-deduction back,
// and a database that says sold out caps the counter at what it holds.
func TestHybridGiveBack(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 3)
	rdb := backendtest.Redis(t)
	h, reg := newHybridWithMetrics(t, s, defaultHybrid, rdb)
	_, err := h.PlaceOrder(ctx, req(sku, "u1"))
	require.NoError(t, err)

	// Redis forgets the buyer (a flush would): admission lets the repeat buyer through, the
	// database's unique key refuses it, and the unit goes back.
	require.NoError(t, rdb.SRem(ctx, "seckill:{"+sku+"}:buyers", "u1").Err())
	_, err = h.PlaceOrder(ctx, req(sku, "u1"))
	assert.ErrorIs(t, err, stock.ErrAlreadyPurchased)
	n, _ := redisStock(t, rdb, sku)
	assert.EqualValues(t, 2, n, "the repeat buyer's unit was given back")

	// Redis overestimates (the database sold elsewhere): the database says sold out and the
	// counter is capped at the database's stock.
	_, err = lockstrategy.NewPessimistic(s, lockstrategy.PessimisticOptions{}, lockMetrics()).PlaceOrder(ctx, req(sku, "p1"))
	require.NoError(t, err)
	_, err = lockstrategy.NewPessimistic(s, lockstrategy.PessimisticOptions{}, lockMetrics()).PlaceOrder(ctx, req(sku, "p2"))
	require.NoError(t, err)
	_, err = h.PlaceOrder(ctx, req(sku, "u2"))
	assert.ErrorIs(t, err, stock.ErrSoldOut)
	n, _ = redisStock(t, rdb, sku)
	assert.Zero(t, n, "capped at the database's stock")
	assert.EqualValues(t, 2, counter(t, reg, "seckill_admission_givebacks_total", nil))
	a, err := s.Audit(ctx, sku)
	require.NoError(t, err)
	assert.True(t, a.Consistent())
	assert.EqualValues(t, 3, a.Orders)
}

// pauseFirst returns hooks that hold the first section placing user's order open for d, and a
// channel closed when that section has read the product.
func pauseFirst(user string, d time.Duration) (lockstrategy.Hooks, <-chan struct{}) {
	var once sync.Once
	read := make(chan struct{})
	return lockstrategy.Hooks{InSection: func(ctx context.Context, orders []stock.OrderRequest) {
		if !slices.ContainsFunc(orders, func(r stock.OrderRequest) bool { return r.UserID == user }) {
			return
		}
		once.Do(func() {
			close(read)
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		})
	}}, read
}

// TestHybridLockExpiry holds a critical section past the lock's TTL with its watchdog unable to
// help (as when the whole holder is paused: GC, VM steal, SIGSTOP). Another instance takes the
// expired lock and sells. The paused writer then writes with its stale version, matches no row,
// retries with a fresh read — and nothing is oversold.
func TestHybridLockExpiry(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 3)
	hook, read := pauseFirst("slow", time.Second)
	paused, pausedReg := newHybridWithMetrics(t, backendtest.Store(t), lockstrategy.HybridOptions{
		TTL: 300 * time.Millisecond, Wait: 2 * time.Second, Attempts: 5,
		Extend: time.Hour, // the watchdog never runs: the holder is "paused" as a whole
		Hooks:  hook,
	}, backendtest.Redis(t))
	other := newHybrid(t, backendtest.Store(t), lockstrategy.HybridOptions{TTL: 300 * time.Millisecond, Wait: 2 * time.Second, Attempts: 5},
		backendtest.Redis(t))

	type result struct {
		order stock.Order
		err   error
	}
	slow := make(chan result, 1)
	go func() {
		o, err := paused.PlaceOrder(ctx, req(sku, "slow"))
		slow <- result{o, err}
	}()
	<-read
	var acked []stock.Order
	for _, user := range []string{"fast-1", "fast-2"} {
		o, err := other.PlaceOrder(ctx, req(sku, user)) // waits out the TTL, then takes the lock
		require.NoError(t, err)
		acked = append(acked, o)
	}
	r := <-slow
	require.NoError(t, r.err, "the paused writer retried with a fresh read and found the last unit")
	acked = append(acked, r.order)

	assert.GreaterOrEqual(t, counter(t, pausedReg, "seckill_optimistic_retries_total", nil), 1.0,
		"the paused writer's version check failed")
	assert.GreaterOrEqual(t, counter(t, pausedReg, "seckill_lock_lost_total", nil), 1.0,
		"the paused writer found its lock gone at release")
	a := backendtest.RequireInvariant(t, s, sku, acked)
	assert.Zero(t, a.Stock)
}

// pausedHolder is an instance whose order for the user "holder" holds the lock for d once it
// has read the product; read is closed then.
func pausedHolder(t *testing.T, d time.Duration) (*lockstrategy.Hybrid, <-chan struct{}) {
	t.Helper()
	hook, read := pauseFirst("holder", d)
	return newHybrid(t, backendtest.Store(t), lockstrategy.HybridOptions{
		TTL: 10 * time.Second, Wait: 2 * time.Second, Attempts: 5, Hooks: hook,
	}, backendtest.Redis(t)), read
}

// TestHybridReleaseWakesWaiter: an instance waiting for a lock that another instance holds tries
// again when the holder's release message arrives, not at its next poll (here: none before the
// wait budget runs out).
func TestHybridReleaseWakesWaiter(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 2)
	holder, read := pausedHolder(t, 200*time.Millisecond)
	waiter, reg := newHybridWithMetrics(t, backendtest.Store(t), lockstrategy.HybridOptions{
		TTL: 10 * time.Second, Wait: 2 * time.Second, Attempts: 5, Poll: time.Minute,
	}, backendtest.Redis(t))

	held := make(chan stock.Order, 1)
	go func() {
		o, err := holder.PlaceOrder(ctx, req(sku, "holder"))
		assert.NoError(t, err)
		held <- o
	}()
	<-read
	second, err := waiter.PlaceOrder(ctx, req(sku, "waiter"))
	require.NoError(t, err)
	assert.Equal(t, 1.0, counter(t, reg, "seckill_lock_release_wakeups_total", nil), "woken by the release")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{<-held, second})
}

// TestBatchTakenAtGrant: orders that reach an instance while its section waits for a lock another
// instance holds are placed together by that section once it gets the lock — one batch, one
// write — not one batch per arrival.
func TestBatchTakenAtGrant(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 20)
	holder, read := pausedHolder(t, 300*time.Millisecond)
	batched, reg := newHybridWithMetrics(t, backendtest.Store(t), lockstrategy.HybridOptions{
		TTL: 10 * time.Second, Wait: 2 * time.Second, Attempts: 5, Batch: 64,
	}, backendtest.Redis(t))

	var (
		mu    sync.Mutex
		acked []stock.Order
		wg    sync.WaitGroup
	)
	place := func(st lockstrategy.Strategy, user string) {
		defer wg.Done()
		o, err := st.PlaceOrder(ctx, req(sku, user))
		if assert.NoError(t, err) {
			mu.Lock()
			acked = append(acked, o)
			mu.Unlock()
		}
	}
	wg.Add(1)
	go place(holder, "holder")
	<-read
	for i := range 10 {
		wg.Add(1)
		go place(batched, fmt.Sprintf("queued-%d", i))
	}
	wg.Wait()
	count, sum := histogram(t, reg, "seckill_batch_orders")
	assert.Equal(t, uint64(1), count, "one section")
	assert.Equal(t, 10.0, sum, "all ten orders in it")
	backendtest.RequireInvariant(t, s, sku, acked)
}

// histogram reads the sample count and sum of a histogram family.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (count uint64, sum float64) {
	t.Helper()
	for _, m := range samples(t, reg, name, nil) {
		count += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// TestHybridWatchdogKeepsLock holds a section for three TTLs with the watchdog running: the lock
// is extended, nobody else gets in meanwhile, and nothing is lost.
func TestHybridWatchdogKeepsLock(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 3)
	hook, read := pauseFirst("slow", 2500*time.Millisecond)
	holder, reg := newHybridWithMetrics(t, backendtest.Store(t), lockstrategy.HybridOptions{
		TTL: time.Second, Wait: 2 * time.Second, Attempts: 5, Hooks: hook,
	}, backendtest.Redis(t))
	other := newHybrid(t, backendtest.Store(t), lockstrategy.HybridOptions{TTL: time.Second, Wait: 1500 * time.Millisecond, Attempts: 5},
		backendtest.Redis(t))

	done := make(chan error, 1)
	var held stock.Order
	go func() {
		var err error
		held, err = holder.PlaceOrder(ctx, req(sku, "slow"))
		done <- err
	}()
	<-read
	_, err := other.PlaceOrder(ctx, req(sku, "impatient"))
	assert.ErrorIs(t, err, stock.ErrBusy, "the extended lock kept the other instance out")
	require.NoError(t, <-done)
	assert.GreaterOrEqual(t, counter(t, reg, "seckill_lock_extensions_total", nil), 2.0)
	assert.Zero(t, counter(t, reg, "seckill_lock_lost_total", nil))
	assert.Zero(t, counter(t, reg, "seckill_optimistic_retries_total", nil))
	backendtest.RequireInvariant(t, s, sku, []stock.Order{held})
}

// TestHybridLockLostAbandonsSection deletes the lock while its holder is inside the section (a
// failover to a replica that never saw the lock): the watchdog's next extension fails, the
// section is abandoned before it writes, the client hears busy, and the admission is given back.
func TestHybridLockLostAbandonsSection(t *testing.T) {
	ctx := context.Background()
	s, sku := onSale(t, 3)
	rdb := backendtest.Redis(t)
	hook, read := pauseFirst("slow", 5*time.Second)
	h := newHybrid(t, s, lockstrategy.HybridOptions{
		TTL: time.Second, Wait: 2 * time.Second, Attempts: 5, Extend: 100 * time.Millisecond, Hooks: hook,
	}, rdb)
	done := make(chan error, 1)
	go func() {
		_, err := h.PlaceOrder(ctx, req(sku, "slow"))
		done <- err
	}()
	<-read
	require.NoError(t, rdb.Del(ctx, "seckill:{"+sku+"}:lock").Err())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, stock.ErrBusy)
	case <-time.After(3 * time.Second):
		t.Fatal("the section was not abandoned after its lock was lost")
	}
	n, _ := redisStock(t, rdb, sku)
	assert.EqualValues(t, 3, n, "the abandoned order's unit was given back")
	backendtest.RequireInvariant(t, s, sku, nil)
}

// forEachMode runs a hybrid fault test once per order and once with group commit: the
// invariant must hold either way.
func forEachMode(t *testing.T, test func(t *testing.T, opts lockstrategy.HybridOptions)) {
	batched := defaultHybrid
	batched.Batch = 64
	t.Run("per-order", func(t *testing.T) { test(t, defaultHybrid) })
	t.Run("batched", func(t *testing.T) { test(t, batched) })
}

// hybrids builds instances hybrid instances over the given Redis addresses (admission on the
// first; locks by quorum over all), each with its own store and clients.
func hybrids(t *testing.T, opts lockstrategy.HybridOptions, addrs ...string) ([]lockstrategy.Strategy, []*prometheus.Registry) {
	t.Helper()
	var insts []lockstrategy.Strategy
	var regs []*prometheus.Registry
	for range instances {
		var clients []*redis.Client
		for _, addr := range addrs {
			c := lockstrategy.NewRedisClient(addr)
			t.Cleanup(func() { _ = c.Close() })
			clients = append(clients, c)
		}
		h, reg := newHybridWithMetrics(t, backendtest.Store(t), opts, clients...)
		insts = append(insts, h)
		regs = append(regs, reg)
	}
	return insts, regs
}

func sum(t *testing.T, regs []*prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	var total float64
	for _, reg := range regs {
		total += counter(t, reg, name, labels)
	}
	return total
}

// TestHybridFlushMidSale flushes Redis in the middle of a sale: the admission state is rebuilt
// from the database, the sale completes, and nothing is oversold. The buyers come in two waves,
// so that admission is asked again after the flush.
func TestHybridFlushMidSale(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts lockstrategy.HybridOptions) {
		srv := backendtest.StartRedis(t)
		insts, regs := hybrids(t, opts, srv.Addr)
		flusher := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer flusher.Close()
		sku := backendtest.SKU(t)
		first := sellOn(t, insts, sku, units, units/2, fault{at: units / 4, inject: func() {
			assert.NoError(t, flusher.FlushAll(context.Background()).Err())
		}})
		res := first.add(wave(t, insts, sku, units/2, buyers, fault{}))
		warms := sum(t, regs, "seckill_admission_total", map[string]string{"result": "warmed"})
		t.Logf("flush mid-sale: outcomes %v, counter built %v times", res.outcome, warms)
		assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
		assert.GreaterOrEqual(t, warms, 2.0, "the counter was built at the start and rebuilt after the flush")
		backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
		assertLinearizable(t, units, res)
	})
}

// TestHybridRedisDown kills Redis in the middle of a sale: orders go on through the
// database-guarded fallback, nothing is oversold; when Redis is back, admission resumes by itself.
// The buyers come in two waves, so that orders surely meet the dead Redis: with group commit the
// orders of the first wave can all be placed before the kill lands.
func TestHybridRedisDown(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts lockstrategy.HybridOptions) {
		srv := backendtest.StartRedis(t)
		insts, regs := hybrids(t, opts, srv.Addr)
		sku := backendtest.SKU(t)
		first := sellOn(t, insts, sku, units, units/2, fault{at: units / 4, inject: srv.Kill})
		res := first.add(wave(t, insts, sku, units/2, buyers, fault{}))
		fallbacks := sum(t, regs, "seckill_redis_fallbacks_total", nil)
		t.Logf("redis killed mid-sale: outcomes %v after %d busy retries; %v orders fell back", res.outcome, res.retries, fallbacks)
		assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
		assert.Positive(t, fallbacks, "orders took the fallback path")
		backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
		// No history check here, on purpose: admission's sold_out means "every unit is reserved", and
		// when Redis dies the reserved orders in flight fail and are given back to the fallback path,
		// so buyers told sold_out early can be followed by sales of those very units. Nothing is
		// oversold (above), but those early answers are not linearizable against the database stock.

		srv.Start()
		time.Sleep(1100 * time.Millisecond) // past the breaker's cooldown
		admittedBefore := sum(t, regs, "seckill_admission_total", map[string]string{"result": "sold_out"})
		for i, h := range insts {
			_, err := h.PlaceOrder(context.Background(), req(sku, "late-"+string(rune('a'+i))))
			assert.ErrorIs(t, err, stock.ErrSoldOut)
		}
		assert.EqualValues(t, admittedBefore+float64(len(insts)), sum(t, regs, "seckill_admission_total", map[string]string{"result": "sold_out"}),
			"after Redis came back, admission answered again (warmed from the database)")
	})
}

// TestRedlockQuorum locks over three independent Redis servers (Redlock) and kills one of them
// mid-sale: the other two still form a quorum, locks are still granted, nothing is oversold.
func TestRedlockQuorum(t *testing.T) {
	forEachMode(t, func(t *testing.T, opts lockstrategy.HybridOptions) {
		servers := []*backendtest.RedisProcess{backendtest.StartRedis(t), backendtest.StartRedis(t), backendtest.StartRedis(t)}
		insts, regs := hybrids(t, opts, servers[0].Addr, servers[1].Addr, servers[2].Addr)
		sku := backendtest.SKU(t)
		res := sellOn(t, insts, sku, units, buyers, fault{at: units / 3, inject: servers[2].Kill})
		t.Logf("redlock, one of three killed mid-sale: outcomes %v after %d busy retries", res.outcome, res.retries)
		assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
		assert.Zero(t, sum(t, regs, "seckill_redis_fallbacks_total", nil), "the quorum held: no order needed the fallback")
		backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
		assertLinearizable(t, units, res)
	})
}
