package lockstrategy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// TestCrossedCheckoutsAcrossInstances is the lesson of checkouts: one lock is easy, two need an order. Across
// three instances of every safe strategy, buyers cross — A+B against B+A, C+A against A+B+C —
// while single orders buy the same products. Every strategy takes its
// locks (rows, admission) in SKU order, so no two checkouts ever hold what the other waits for:
// no lock wait runs out (a crossed pair taken in request order deadlocks until it does: the
// planted request-order bug, which a first pair, held at its first lock, meets every time), no
// answer takes 3 s, no 5xx, and at no moment is a checkout seen in part; at the end the
// invariant holds per product and every checkout answered 201 is whole.
func TestCrossedCheckoutsAcrossInstances(t *testing.T) {
	for _, v := range strategies() {
		// The lock order is what this test is about, not the batch size: one configuration of each.
		if strings.HasSuffix(v.name, "/one-per-section") {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			sellCrossed(t, v.cfg, v.accepts, backendtest.Wiring{})
		})
	}
	// On a Redis Cluster each product's admission keys and lock live in a slot of their own,
	// most likely on different masters: hybrid admits the lines one by one, as on one node.
	t.Run("hybrid/redis-cluster", func(t *testing.T) {
		t.Parallel()
		c := backendtest.StartRedisCluster(t)
		w := backendtest.Wiring{RedisMode: redisclient.Cluster, RedisAddrs: c.Addrs()}
		sellCrossed(t, config("hybrid"), false, w)
	})
}

const (
	crossedStock      = 8 // of each product
	crossedCheckouts  = 4 // of each of the four crossings: few, so that no lock wait runs out but in a deadlock
	crossedSingles    = 2 // of each product
	crossedStallLimit = 3 * time.Second
)

// sellCrossed runs the crossed sale on instances of cfg and checks it
// (TestCrossedCheckoutsAcrossInstances): first a pair crossed at its first lock, then the sale.
// A strategy that accepts (queued) has its checkouts followed to their end; its writers take
// crossed checkouts of the same products in one section, so it has no pair to cross.
func sellCrossed(t *testing.T, cfg service.Config, accepts bool, w backendtest.Wiring) {
	base := backendtest.SKU(t)
	a, b, c := base+"-a", base+"-b", base+"-c"
	skus := []string{a, b, c}
	pair := []string{base + "-d", base + "-e"}
	if !accepts {
		cfg.Hooks.Locking = crossAtFirstLock(pair)
	}
	insts := newInstances(t, instances, cfg, w)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if !accepts {
		crossPair(ctx, t, insts, pair)
	}
	for _, sku := range skus {
		_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "crossed", Stock: crossedStock, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	db := backendtest.SQL(t)
	var (
		mu        sync.Mutex
		checkouts []stock.Checkout
		orders    = map[string][]stock.Order{}
		outcomes  = map[string]int{}
		slowest   time.Duration
		wg        sync.WaitGroup
		done      atomic.Bool
		partial   []string
	)
	crossings := [][]string{{a, b}, {b, a}, {c, a}, {a, b, c}}
	lines := map[string]int{} // each buyer's checkout's
	for i := range crossedCheckouts * len(crossings) {
		lines[fmt.Sprintf("checkout-%03d", i)] = len(crossings[i%len(crossings)])
	}
	observed := make(chan struct{})
	go func() { // the outside view: never half a checkout, at any moment
		defer close(observed)
		for !done.Load() {
			if p := backendtest.PartialCheckouts(t, db, skus, lines); len(p) > 0 {
				partial = p
				return
			}
		}
	}()
	answer := func(kind string, took time.Duration, err error) bool {
		mu.Lock()
		defer mu.Unlock()
		slowest = max(slowest, took)
		code := stock.Code(err)
		outcomes[kind+" "+code]++
		if code == "busy" && stock.CauseOfBusy(err) != stock.BusyLockWait {
			return false // admission's held units, a version conflict: ask again
		}
		return true
	}
	start := make(chan struct{})
	for i := range crossedCheckouts * len(crossings) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := insts[i%len(insts)]
			strategy, _ := inst.Resolve("")
			req := stock.CheckoutRequest{UserID: fmt.Sprintf("checkout-%03d", i), Strategy: strategy}
			for _, sku := range crossings[i%len(crossings)] {
				req.Lines = append(req.Lines, stock.OrderRequest{SKU: sku, Quantity: 1})
			}
			<-start
			for ctx.Err() == nil {
				began := time.Now()
				co, _, err := inst.Place(ctx, req)
				if !answer("checkout", time.Since(began), err) {
					continue
				}
				if err == nil && co.Status == stock.Queued {
					co, err = endOf(ctx, inst, co.CheckoutID)
					answer("accepted checkout", 0, err)
				}
				if err == nil {
					mu.Lock()
					checkouts = append(checkouts, co)
					for _, line := range co.Lines {
						orders[line.SKU] = append(orders[line.SKU], line)
					}
					mu.Unlock()
				}
				return
			}
		}()
	}
	for i := range crossedSingles * len(skus) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := insts[i%len(insts)]
			strategy, _ := inst.Resolve("")
			req := stock.OrderRequest{SKU: skus[i%len(skus)], UserID: fmt.Sprintf("single-%03d", i), Quantity: 1, Strategy: strategy}
			<-start
			for ctx.Err() == nil {
				began := time.Now()
				o, _, err := inst.PlaceOrder(ctx, req)
				if !answer("order", time.Since(began), err) {
					continue
				}
				if err == nil && o.Status == stock.Queued {
					o, err = inst.WaitOrder(ctx, o.OrderID, 10*time.Second)
					if err == nil && !o.Status.Active() {
						err = fmt.Errorf("accepted order %s ended %s (%s)", o.OrderID, o.Status, o.Reason)
					}
					answer("accepted order", 0, err)
				}
				if err == nil {
					mu.Lock()
					orders[o.SKU] = append(orders[o.SKU], o)
					mu.Unlock()
				}
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	done.Store(true)
	<-observed
	t.Logf("outcomes %v; slowest answer %s", outcomes, slowest.Round(time.Millisecond))
	require.NoError(t, ctx.Err(), "the buyers did not finish")
	assert.Empty(t, partial, "half a checkout seen from outside")
	for kind, n := range outcomes {
		assert.Contains(t, []string{"checkout ok", "checkout sold_out", "order ok", "order sold_out", "checkout busy", "order busy",
			"accepted checkout ok", "accepted order ok"}, kind,
			"an answer no crossing may give (%d times)", n)
	}
	assert.Zero(t, outcomes["checkout busy"]+outcomes["order busy"], "a lock wait ran out: locks taken in another order than SKU order wait for each other")
	assert.Less(t, slowest, crossedStallLimit, "an answer took longer than the promise")
	assert.NotZero(t, outcomes["checkout ok"], "no checkout placed: nothing crossed")
	assert.NotZero(t, outcomes["checkout sold_out"], "no checkout refused: the sale never ran short")
	store := backendtest.Store(t)
	for _, sku := range skus {
		backendtest.RequireInvariant(t, store, sku, orders[sku])
	}
	backendtest.RequireWholeCheckouts(t, store, db, skus, lines, checkouts)
	for _, sku := range skus {
		assert.Eventually(t, func() bool {
			audit, err := insts[0].Audit(ctx, sku)
			return err == nil && audit.HeldBack() == 0
		}, 10*time.Second, 20*time.Millisecond, "%s: admission still holds back units of placed or refused lines", sku)
	}
}

// endOf follows an accepted checkout to its end: placed, or an error — rejected (a writer
// refused it) is one, since admission holds every line's units.
func endOf(ctx context.Context, inst backendtest.Instance, id string) (stock.Checkout, error) {
	co, err := inst.WaitCheckout(ctx, id, 10*time.Second)
	switch {
	case err != nil:
		return co, err
	case co.Status == stock.Queued:
		return co, fmt.Errorf("checkout %s still queued after 10 s", id)
	case co.Status == stock.Rejected:
		return co, fmt.Errorf("accepted checkout %s rejected (%s)", id, co.Reason)
	}
	return co, nil
}

// crossAtFirstLock returns the hook that holds each checkout of pair's products, once it has
// its first product's lock, until the other checkout has its own first lock or is about to
// wait for the one held. Locks taken in one order then queue; taken in two, they deadlock.
func crossAtFirstLock(pair []string) func(ctx context.Context, skus []string, held int) {
	var (
		mu      sync.Mutex
		changed = make(chan struct{})
		firsts  []string // the first product of each checkout that came to lock
		holding int      // checkouts holding their first lock
	)
	return func(ctx context.Context, skus []string, held int) {
		if !slices.Equal(slices.Sorted(slices.Values(skus)), pair) || held > 1 {
			return
		}
		mu.Lock()
		if held == 0 {
			firsts = append(firsts, skus[0])
		} else {
			holding++
		}
		close(changed)
		changed = make(chan struct{})
		for held == 1 && !(len(firsts) >= 2 && (firsts[0] == firsts[1] || holding >= 2)) {
			wait := changed
			mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return
			}
			mu.Lock()
		}
		mu.Unlock()
	}
}

// crossPair places pair's two checkouts, one in each order, on two instances at once, held by
// crossAtFirstLock: both are placed, none waits out its lock.
func crossPair(ctx context.Context, t *testing.T, insts []backendtest.Instance, pair []string) {
	for _, sku := range pair {
		_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "crossed pair", Stock: 2, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, order := range [][]string{pair, {pair[1], pair[0]}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			strategy, _ := insts[i].Resolve("")
			req := stock.CheckoutRequest{UserID: fmt.Sprintf("pair-%d", i), Strategy: strategy}
			for _, sku := range order {
				req.Lines = append(req.Lines, stock.OrderRequest{SKU: sku, Quantity: 1})
			}
			for ctx.Err() == nil {
				_, _, errs[i] = insts[i].Place(ctx, req)
				if stock.Code(errs[i]) != "busy" || stock.CauseOfBusy(errs[i]) == stock.BusyLockWait {
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "crossed pair, checkout %d: a lock wait ran out: locks taken in another order than SKU order wait for each other", i)
	}
}

// TestNaiveCheckoutsOversell: naive places checkouts as unsafely as orders — each line's stock
// written as computed from a read with no lock and no condition — so checkouts that race
// oversell, and the invariant check sees it.
func TestNaiveCheckoutsOversell(t *testing.T) {
	insts := newInstances(t, instances, naive(), backendtest.Wiring{})
	base := backendtest.SKU(t)
	a, b := base+"-a", base+"-b"
	ctx := context.Background()
	for _, sku := range []string{a, b} {
		_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "naive", Stock: 3, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	var (
		mu    sync.Mutex
		acked []stock.Order
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := insts[i%len(insts)]
			req := stock.CheckoutRequest{UserID: fmt.Sprintf("buyer-%02d", i), Strategy: "naive",
				Lines: []stock.OrderRequest{{SKU: a, Quantity: 1}, {SKU: b, Quantity: 1}}}
			<-start
			co, _, err := inst.Place(ctx, req)
			if err == nil {
				mu.Lock()
				acked = append(acked, co.Lines[0])
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("naive: %d checkouts of 3 units placed", len(acked))
	assert.Greater(t, len(acked), 3, "racing checkouts with no lock sold more than the stock")
	requireInvariantFails(t, backendtest.Store(t), a, acked)
}
