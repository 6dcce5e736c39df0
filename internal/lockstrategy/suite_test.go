package lockstrategy_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/buyer"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// config is the default configuration (what cmd/api runs) with the default strategy set to
// strategy.
func config(strategy string) service.Config {
	cfg := service.Defaults()
	cfg.Strategy = strategy
	return cfg
}

// variant is one row of the suite's table: a strategy in one configuration — the default
// (group commit), or one order per critical section — and what it can be put through.
type variant struct {
	name string // the strategy, and its configuration when it is not the default
	cfg  service.Config
	capabilities
}

// capabilities are what a strategy can be put through; the tests about one pick their
// strategies by it.
type capabilities struct {
	strategy string
	// losesLock takes its lock from a holder paused inside its section
	// (TestPausedHolderLosesItsLock); nil: no test here takes it — pessimistic's row lock ends
	// with its transaction, and dblock's expiring row is TestLockTable's (internal/stock).
	losesLock *lockLoss
	// losesMember are the faults that take one member of its lock service's cluster down
	// mid-sale (TestMemberLoss).
	losesMember []memberLoss
	// accepts: it answers 202 and the order ends later (queued). The suite waits for every 202
	// to end, and a queued order is cancelled once it is placed: before, it has no row to cancel.
	accepts bool
}

// strategies is the suite's table: every safe strategy, queued included, both ways, and
// pessimistic's waiting form (stock.WaitForRow). Each must pass the shared suite; the tests about
// one capability pick their strategies here.
func strategies() []variant {
	var out []variant
	for _, c := range []capabilities{
		{strategy: "hybrid", losesLock: &redisLockExpires, losesMember: []memberLoss{redisClusterMasterKilled, redisSentinelMasterKilled}},
		{strategy: "etcd", losesLock: &etcdLeaseRevoked, losesMember: []memberLoss{etcdMemberStopped}},
		{strategy: "zookeeper", losesLock: &zkSessionExpires, losesMember: []memberLoss{zkLeaderKilled}},
		{strategy: "pessimistic"},
		{strategy: "dblock"},
		{strategy: "queued", accepts: true},
	} {
		out = append(out, c.bothWays()...)
	}
	wait := config("pessimistic")
	wait.RowLock = stock.WaitForRow
	return append(out, variant{"pessimistic/wait", wait, capabilities{strategy: "pessimistic"}})
}

// bothWays is c in the default configuration and with one order per critical section.
func (c capabilities) bothWays() []variant {
	one := config(c.strategy)
	one.GroupCommit = 1
	return []variant{{c.strategy, config(c.strategy), c}, {c.strategy + "/one-per-section", one, c}}
}

// memberLoss is a fault that takes one member of a lock service's cluster down: start brings up
// a fresh cluster for a sale of sku and returns the wiring to it and the fault; what says what
// the fault does, for the log.
type memberLoss struct {
	name, what string
	start      func(t *testing.T, sku string) (backendtest.Wiring, func())
}

// TestMemberLoss runs the shared suite's sale under every strategy whose lock service can lose a
// member, each on a fresh cluster, the member lost mid-sale (sellThroughMemberLoss).
func TestMemberLoss(t *testing.T) {
	t.Parallel() // servers of its own: beside the other cluster tests, after the rest
	for _, v := range strategies() {
		for _, loss := range v.losesMember {
			t.Run(v.name+"/"+loss.name, func(t *testing.T) {
				t.Parallel()
				sellThroughMemberLoss(t, v, loss)
			})
		}
	}
}

// sellThroughMemberLoss runs the shared suite's sale under v on a fresh cluster of its lock
// service, with one member lost mid-sale: exactly the stock sells, the rest hear sold_out, and
// the history fits one product's stock. Then the instances must sell again through what is left
// of the cluster (soldAfterLoss): a sale that ended on the database-guarded path, or before the
// member was gone, proves nothing about the clients following the new master or the surviving
// members. What became of the locks is logged: lost by their holders, and orders that took the
// database-guarded path while Redis was unreachable.
func sellThroughMemberLoss(t *testing.T, v variant, loss memberLoss) {
	sku := backendtest.SKU(t)
	w, inject := loss.start(t, sku)
	insts := newInstances(t, instances, v.cfg, w)
	var lost time.Time
	res := sellOn(t, insts, sku, units, buyers, fault{at: units / 3, inject: func() { inject(); lost = time.Now() }})
	t.Logf("%s, %s mid-sale: outcomes %v after %d busy retries; locks lost by holders %.0f, Redis fallbacks %.0f",
		v.name, loss.what, res.outcome, res.retries, backendtest.Counter(t, "seckill_lock_lost_total", nil, insts...),
		backendtest.Counter(t, "seckill_redis_fallbacks_total", nil, insts...))
	assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
	assertLinearizable(t, units, res)
	t.Logf("every instance sold through the rest of the cluster %s after the fault (its injection returned)",
		soldAfterLoss(t, insts, v.cfg.Strategy).Sub(lost).Round(10*time.Millisecond))
}

// soldAfterLoss has every instance buy one unit of a fresh product, round after round, until a
// round sells on the lock service itself — under hybrid: every order admitted by Redis and none
// on the database-guarded path — and returns when it did. It fails the test after 15 s, or at
// the first answer no fault may give (a 500); every round must keep the invariant.
func soldAfterLoss(t *testing.T, insts []backendtest.Instance, strategy string) time.Time {
	t.Helper()
	ctx := context.Background()
	admitted := func() float64 {
		return backendtest.Counter(t, "seckill_admission_total", map[string]string{"result": "admitted"}, insts...)
	}
	fallbacks := func() float64 { return backendtest.Counter(t, "seckill_redis_fallbacks_total", nil, insts...) }
	type round struct {
		sku   string
		acked []stock.Order
	}
	var (
		rounds []round
		wrong  error
		sold   time.Time
	)
	require.Eventually(t, func() bool {
		sku := backendtest.SKU(t)
		if _, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: int64(len(insts)), MaxPerOrder: 1}); err != nil {
			return false // a reset needs Redis: the Cluster or Sentinel may still be failing over
		}
		admittedBefore, fallbacksBefore := admitted(), fallbacks()
		r := round{sku: sku}
		for i, inst := range insts {
			order, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("after-%d", i), Quantity: 1, Strategy: strategy})
			switch code := stock.Code(err); code {
			case "ok":
				r.acked = append(r.acked, order)
			case "busy", "unavailable":
			default:
				wrong = fmt.Errorf("instance %d answered %s: %w", i, code, err)
			}
		}
		rounds = append(rounds, r)
		viaRedis := strategy != "hybrid" || (admitted()-admittedBefore == float64(len(insts)) && fallbacks() == fallbacksBefore)
		if wrong != nil || len(r.acked) == len(insts) && viaRedis {
			sold = time.Now()
			return true
		}
		return false
	}, 15*time.Second, 200*time.Millisecond, "15 s after the loss the instances still did not sell through the cluster")
	require.NoError(t, wrong, "after the loss")
	for _, r := range rounds {
		backendtest.RequireInvariant(t, backendtest.Store(t), r.sku, r.acked)
	}
	return sold
}

// placeRetrying places r on inst, busy retried for up to d as a client does (buyer.Buyer).
func placeRetrying(t *testing.T, inst backendtest.Instance, r stock.OrderRequest, d time.Duration) (stock.Order, error) {
	t.Helper()
	out, err := buyer.Buyer{Places: []buyer.Place{inst.PlaceOrder}, Until: time.Now().Add(d)}.Buy(context.Background(), r)
	if err != nil {
		return out.Order, err
	}
	return out.Order, out.Err
}

// naive is the unsafe strategy, allowed, with a race window wide enough to oversell every time.
func naive() service.Config {
	cfg := config("naive")
	cfg.AllowUnsafe = true
	cfg.NaivePause = 20 * time.Millisecond
	return cfg
}

// onSale puts a fresh product with units on sale and returns a store and its SKU.
func onSale(t *testing.T, units int64) (*stock.Store, string) {
	t.Helper()
	s, sku := backendtest.Store(t), backendtest.SKU(t)
	_, err := s.PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: units, MaxPerOrder: 1})
	require.NoError(t, err)
	return s, sku
}

// newInstances builds n independent instances of cfg (each its own store, pools and clients)
// on the wiring w; the zookeeper strategy on the test process's ZooKeeper unless w names one.
func newInstances(t *testing.T, n int, cfg service.Config, w backendtest.Wiring) []backendtest.Instance {
	t.Helper()
	if len(w.ZKServers) == 0 {
		w.ZKServers = backendtest.ZooKeeperFor(t, cfg.Strategy)
	}
	var insts []backendtest.Instance
	for range n {
		insts = append(insts, backendtest.NewInstance(t, cfg, w))
	}
	return insts
}

const (
	instances = 3
	buyers    = 200
	units     = 50
)

// saleResult is what the buyers of one sale were told.
type saleResult struct {
	acked     []stock.Order // the orders placed and kept
	cancelled int           // orders placed and cancelled at once
	outcome   map[string]int
	retries   int
	history   []porcupine.Operation // every purchase (a buyer's attempts) and cancel: call, return, outcome
}

// sell runs one flash sale on instances independent instances of cfg.
func sell(t *testing.T, cfg service.Config, sku string, stockUnits, buyers int) saleResult {
	t.Helper()
	return sellOn(t, newInstances(t, instances, cfg, backendtest.Wiring{}), sku, stockUnits, buyers, fault{})
}

// fault is injected once, when the sale has sold at units. Besides, the first cancel buyers to
// get an order cancel it at once (on the instance that placed it).
type fault struct {
	at     int
	inject func()
	cancel int
	// afterWave cancels once every buyer of the wave has its answer, outside the history: for a
	// strategy that accepts, whose cancels wait for the placement and land among a crowd of
	// sold-out answers, a history porcupine's search could not decide in two minutes.
	afterWave bool
}

// sellOn starts a sale of stockUnits and runs one wave of buyers through it.
func sellOn(t *testing.T, insts []backendtest.Instance, sku string, stockUnits, buyers int, f fault) saleResult {
	t.Helper()
	_, err := insts[0].PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: "suite", Stock: int64(stockUnits), MaxPerOrder: 1})
	require.NoError(t, err)
	return wave(t, insts, sku, 0, buyers, f)
}

// wave runs buyers user-from ... user-(to-1) against the sale: one goroutine each, spread over
// insts, released together by close(start), each buying one unit with its instance's default
// strategy — one buyer.Buyer each, busy retried until the deadline; every buyer must end with
// an order (or an accepted one) or sold_out. A fault, if given, is injected while the wave goes on.
func wave(t *testing.T, insts []backendtest.Instance, sku string, from, to int, f fault) saleResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		res      = saleResult{outcome: map[string]int{}}
		wg       sync.WaitGroup
		injected sync.WaitGroup
		later    []func()
	)
	start := make(chan struct{})
	for i := from; i < to; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := insts[i%len(insts)]
			strategy, _ := inst.Resolve("") // the default: never an error
			req := stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("user-%03d", i), Quantity: 1, Strategy: strategy}
			<-start
			out, err := buyer.Buyer{ID: i, Places: []buyer.Place{inst.PlaceOrder}}.Buy(ctx, req)
			mu.Lock()
			res.retries += out.Retries()
			res.history = append(res.history, out.Op)
			res.outcome[out.Code()]++
			cancel := false
			switch {
			case err != nil:
				t.Error(err)
			case out.Err == nil:
				if cancel = res.cancelled < f.cancel; cancel {
					res.cancelled++
				} else {
					res.acked = append(res.acked, out.Order)
				}
				if f.inject != nil && len(res.acked) == f.at {
					injected.Add(1)
					go func() { defer injected.Done(); f.inject() }()
				}
			case !errors.Is(out.Err, stock.ErrSoldOut):
				t.Errorf("%s: unexpected error: %v", req.UserID, out.Err)
			}
			if cancel && f.afterWave {
				later = append(later, func() { cancelOrder(ctx, t, inst, i, out.Order) })
				cancel = false
			}
			mu.Unlock()
			if cancel {
				if op, ok := cancelOrder(ctx, t, inst, i, out.Order); ok {
					mu.Lock()
					res.history = append(res.history, op)
					mu.Unlock()
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	injected.Wait()
	for _, c := range later {
		c()
	}
	return res
}

// cancelOrder has buyer client cancel order on inst, and returns the cancel as a history
// operation. An accepted order is cancelled once it is placed: while queued it has no row to
// cancel. It reports false when the order never was.
func cancelOrder(ctx context.Context, t *testing.T, inst backendtest.Instance, client int, order stock.Order) (porcupine.Operation, bool) {
	if order.Status == stock.Queued {
		placed, err := inst.WaitOrder(ctx, order.OrderID, 10*time.Second)
		if !assert.NoError(t, err, "wait for %s", order.OrderID) || !assert.True(t, placed.Status.Active(), "%s ended %s", order.OrderID, placed.Status) {
			return porcupine.Operation{}, false
		}
	}
	call := buyer.Elapsed()
	_, err := inst.CancelOrder(ctx, order.OrderID, order.UserID)
	assert.NoError(t, err, "cancel %s", order.OrderID)
	// The cancel takes effect for the next buyer once admission has the unit back: the relay's
	// step, which runs just after the cancel answers (restock_pending cleared). Until then
	// admission may still answer sold out, and a loaded machine stretches that moment.
	assert.Eventually(t, func() bool {
		var pending bool
		err := backendtest.SQL(t).QueryRowContext(ctx, "SELECT restock_pending FROM orders WHERE order_id = ?", order.OrderID).Scan(&pending)
		return err == nil && !pending
	}, 10*time.Second, 5*time.Millisecond, "the units of %s never reached admission", order.OrderID)
	return porcupine.Operation{ClientId: client, Input: backendtest.Cancel{Qty: order.Quantity},
		Call: call, Output: stock.Code(err), Return: buyer.Elapsed()}, true
}

// TestStrategies is the suite every safe strategy must pass: 200 buyers on 3 instances against
// 50 units sell exactly 50, the rest hear sold_out, and the invariant holds. Under a strategy
// that accepts (queued), the 50 are answered queued — admission answers the rest sold_out, never
// queued — and every 202 ends placed, by writers on any instance, none rejected, nothing left
// queued.
func TestStrategies(t *testing.T) {
	for _, v := range strategies() {
		t.Run(v.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			insts := newInstances(t, instances, v.cfg, backendtest.Wiring{})
			res := sellOn(t, insts, sku, units, buyers, fault{})
			t.Logf("%s on %s: outcomes %v after %d busy retries", v.name, backendtest.Dialect(t), res.outcome, res.retries)
			assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, ended(t, v, insts, sku, res.acked))
			assert.Zero(t, a.Stock)
			assertLinearizable(t, units, res)
		})
	}
}

// ended is the orders a sale under v placed, of those its buyers were answered: the answers
// themselves, or, under a strategy that accepts, what each 202 ended as. Those must all be
// answered queued, end placed within 10 s (none rejected), and leave nothing queued in the
// audit; which instances' writers placed them is logged.
func ended(t *testing.T, v variant, insts []backendtest.Instance, sku string, answered []stock.Order) []stock.Order {
	t.Helper()
	if !v.accepts {
		return answered
	}
	for _, o := range answered {
		assert.Equal(t, stock.Queued, o.Status, "a queued order is answered queued")
	}
	placed, rejected := backendtest.Ended(t, insts, answered, 10*time.Second)
	assert.Empty(t, rejected)
	audit, err := insts[0].Audit(context.Background(), sku)
	require.NoError(t, err)
	require.NotNil(t, audit.Queued)
	assert.Zero(t, *audit.Queued, "nothing queued: every ended order's reservation settled or given back")
	// An order's end is said before its message is acked: the queue empties right after.
	assert.Eventually(t, func() bool {
		return backendtest.Gauges(t, "seckill_queue_depth", map[string]string{"sku": sku}, insts...) == 0
	}, 5*time.Second, 10*time.Millisecond, "nothing left in the queue: the message of every ended order acked")
	writers := 0
	for _, inst := range insts {
		if backendtest.Counter(t, "seckill_queue_orders_total", map[string]string{"event": "placed"}, inst) > 0 {
			writers++
		}
	}
	t.Logf("orders placed by the writers of %d of %d instances", writers, len(insts))
	return placed
}

// TestCancelsReturnUnits: under every safe strategy, the first buyers to get an order cancel it
// at once (an accepted one once it is placed), while the sale goes on across three instances;
// their units go back on sale, and the buyers of a second wave buy them: exactly the stock ends
// up held by orders, each cancelled unit sold again once, and the history — cancels included —
// fits one product's stock. The cancels come early, while stock is left, so that no instance has
// a sold-out flag to drop when they land — except under a strategy that accepts, whose cancels
// wait for the placement: they come once the first wave has its answers, and its history is
// checked without them (porcupine's search of 40 accepted orders among sold-out answers with 8
// cancels landing late ran past two minutes, undecided).
func TestCancelsReturnUnits(t *testing.T) {
	const units, cancels, perWave = 20, 8, 40
	for _, v := range strategies() {
		t.Run(v.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			insts := newInstances(t, instances, v.cfg, backendtest.Wiring{})
			_, err := insts[0].PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: "cancels", Stock: units, MaxPerOrder: 1})
			require.NoError(t, err)
			first := wave(t, insts, sku, 0, perWave, fault{cancel: cancels, afterWave: v.accepts})
			second := wave(t, insts, sku, perWave, 2*perWave, fault{})
			res := first.add(second)
			t.Logf("%s: outcomes %v, %d cancelled at once, after %d busy retries", v.name, res.outcome, res.cancelled, res.retries)
			assert.Equal(t, cancels, res.cancelled)
			assert.Equal(t, map[string]int{"ok": units + cancels, "sold_out": 2*perWave - units - cancels}, res.outcome,
				"every cancelled unit sold again")
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, ended(t, v, insts, sku, res.acked))
			assert.Zero(t, a.Stock)
			assert.EqualValues(t, cancels, a.Cancelled)
			// The second wave starts after the first has ended, so every linearization of the
			// whole puts the first wave before the second: checked apart, each from the stock
			// the one before left — the same verdict, without a search through both at once
			// (which ran past the checker's 30 s on a busy machine).
			assertLinearizable(t, units, first)
			assertLinearizable(t, units-first.outcome["ok"]+first.cancelled, second)
		})
	}
}

// assertLinearizable checks a sale's history against backendtest.StockModel.
func assertLinearizable(t *testing.T, units int, res saleResult) {
	t.Helper()
	backendtest.AssertLinearizable(t, units, res.history)
}

// TestHistoryCheckerCatchesOversell plants the bug: naive on a small sale (small, because
// proving that no linearization exists means trying them all). Its history must be rejected.
func TestHistoryCheckerCatchesOversell(t *testing.T) {
	res := sellOn(t, newInstances(t, instances, naive(), backendtest.Wiring{}), backendtest.SKU(t), 3, 12, fault{})
	require.Greater(t, res.outcome["ok"], 3, "naive did not oversell this time: nothing to catch")
	assert.Equal(t, porcupine.Illegal, backendtest.Linearizable(3, res.history),
		"the linearizability checker accepted an oversold history")
}

// TestNaiveOversells proves that the suite's checks can see overselling: the unlocked
// read-check-write strategy, under the same load, must break the invariant. If this test fails,
// the checks above are blind and their passing means nothing. It must race within one instance
// too — the embedded default runs one — where only its own sections overlap.
func TestNaiveOversells(t *testing.T) {
	for _, tc := range []struct {
		name      string
		instances int
	}{{"three instances", instances}, {"one instance", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			res := sellOn(t, newInstances(t, tc.instances, naive(), backendtest.Wiring{}), sku, units, buyers, fault{})
			a, err := backendtest.Store(t).Audit(context.Background(), sku)
			require.NoError(t, err)
			t.Logf("naive on %s, %s: outcomes %v, audit %+v, oversold %d", backendtest.Dialect(t), tc.name, res.outcome, a, a.Oversold())
			assert.Greater(t, res.outcome["ok"], units, "naive sold no more than the stock: the race was not exercised")
			assert.Positive(t, a.Oversold(), "the audit did not report the oversell")
			assert.False(t, a.Consistent(), "the audit called an oversold sale consistent")
			requireInvariantFails(t, backendtest.Store(t), sku, res.acked)
		})
	}
}

// requireInvariantFails checks that RequireInvariant rejects an oversold sale of sku.
func requireInvariantFails(t *testing.T, s *stock.Store, sku string, acked []stock.Order) {
	t.Helper()
	rec := &failRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		backendtest.RequireInvariant(rec, s, sku, acked)
	}()
	<-done
	assert.True(t, rec.failed, "RequireInvariant passed an oversold sale")
}

// failRecorder is a testing.TB that records a failure instead of failing the real test, so a
// test can check that a checker fails.
type failRecorder struct {
	testing.TB
	failed bool
}

func (r *failRecorder) Helper()               {}
func (r *failRecorder) Errorf(string, ...any) { r.failed = true }
func (r *failRecorder) FailNow()              { r.failed = true; runtime.Goexit() }

// add merges the result of another wave of the same sale.
func (r saleResult) add(o saleResult) saleResult {
	out := saleResult{outcome: map[string]int{}, acked: append(append([]stock.Order{}, r.acked...), o.acked...), retries: r.retries + o.retries,
		cancelled: r.cancelled + o.cancelled,
		history:   append(append([]porcupine.Operation{}, r.history...), o.history...)}
	for _, m := range []map[string]int{r.outcome, o.outcome} {
		for k, v := range m {
			out.outcome[k] += v
		}
	}
	return out
}
