package queued_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/natsserver"
	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

// TestQueuedRejectsWhatTheDatabaseLacks: when the database has fewer units than admission
// thought (here: taken behind admission's back), the writer answers the extra orders rejected
// with reason sold_out, and their units go back to admission — every 202 ends, never with an
// order the stock cannot back.
func TestQueuedRejectsWhatTheDatabaseLacks(t *testing.T) {
	sku := backendtest.SKU(t)
	insts := newInstances(t, 1, config("queued"), backendtest.Wiring{})
	ctx := context.Background()
	_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 4, MaxPerOrder: 1})
	require.NoError(t, err)
	// Two units leave the database, not admission: admission still offers four.
	_, err = backendtest.SQL(t).ExecContext(ctx, "UPDATE products SET stock = stock - 2, initial_stock = initial_stock - 2 WHERE sku = ?", sku)
	require.NoError(t, err)
	var accepted []stock.Order
	for i := range 4 {
		o, _, err := insts[0].PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("u-%d", i), Quantity: 1, Strategy: "queued"})
		require.NoError(t, err)
		accepted = append(accepted, o)
	}
	placed, rejected := backendtest.Ended(t, insts, accepted, 10*time.Second)
	assert.Len(t, placed, 2)
	// Which two: the instance's two writer loops take deliveries side by side, so a later order
	// can be written before an earlier one that another loop holds.
	assert.Len(t, rejected, 2)
	for id, reason := range rejected {
		assert.Equal(t, "sold_out", reason, "order %s", id)
	}
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	audit, err := insts[0].Audit(ctx, sku)
	require.NoError(t, err)
	require.NotNil(t, audit.Redis)
	require.NotNil(t, audit.Redis.Stock)
	assert.Zero(t, *audit.Redis.Stock, "admission capped at what the database said")
	assert.Zero(t, audit.Redis.Reservations, "every reservation ended: settled or given back")
}

// TestQueuedRecordedFirst: before its publisher records an order (a publisher descheduled or
// frozen on the way, as on a loaded machine) someone else may record it first, and the first
// record decides. A writer that took the message and placed it, or rejected it sold_out, means the
// order was accepted: the buyer hears 202, and the order ends as the writer decided. A sweeper's
// rejection (the instance frozen before its publish, its heartbeat lapsed) means it was never
// accepted: the buyer hears unavailable, and its unit goes back on sale.
func TestQueuedRecordedFirst(t *testing.T) {
	for _, c := range []struct {
		name  string
		units int64 // in the database; admission offers one either way
		swept bool
		want  stock.Status
	}{
		{name: "a writer placed it", units: 1, want: stock.Confirmed},
		{name: "a writer rejected it", units: 0, want: stock.Rejected},
		{name: "a sweeper gave it up", units: 1, swept: true, want: stock.Rejected},
	} {
		t.Run(c.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			cfg := config("queued")
			var inst backendtest.Instance
			if c.swept {
				sweeper := backendtest.OpenQueue(t, backendtest.QueueConfig(t), prometheus.NewRegistry())
				// As a sweeper does, before the message can reach a writer.
				cfg.Hooks.Admitted = func(ctx context.Context, orderID string) {
					_, err := sweeper.Record(ctx, orderqueue.Record{Order: orderqueue.Order{OrderID: orderID, SKU: sku, UserID: "u-1",
						Quantity: 1, Strategy: "queued", Reservation: orderID, AcceptedAt: time.Now().UTC()},
						State: orderqueue.Rejected, Reason: "unavailable"})
					assert.NoError(t, err)
				}
			}
			cfg.Hooks.Published = func(ctx context.Context, orderID string) {
				o, err := inst.WaitOrder(ctx, orderID, 10*time.Second)
				assert.NoError(t, err)
				assert.Equal(t, c.want, o.Status, "decided before its publisher recorded it")
			}
			inst = newInstances(t, 1, cfg, backendtest.Wiring{})[0]
			ctx := context.Background()
			_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
			require.NoError(t, err)
			_, err = backendtest.SQL(t).ExecContext(ctx, "UPDATE products SET stock = ?, initial_stock = ? WHERE sku = ?", c.units, c.units, sku)
			require.NoError(t, err)
			o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: "queued"})
			var placed []stock.Order
			if c.swept {
				require.ErrorIs(t, err, stock.ErrUnavailable, "given up before it was recorded queued: never accepted")
			} else {
				require.NoError(t, err, "its message went out: the order was accepted")
				assert.Equal(t, stock.Queued, o.Status)
				var rejected map[string]string
				placed, rejected = backendtest.Ended(t, []backendtest.Instance{inst}, []stock.Order{o}, 10*time.Second)
				if c.want == stock.Rejected {
					assert.Equal(t, map[string]string{o.OrderID: "sold_out"}, rejected)
				} else {
					assert.Len(t, placed, 1)
				}
			}
			backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
			settled(t, inst, sku)
		})
	}
}

// TestQueuedNoAcceptWithoutRecord: the queue's server dies between an order's publish and its
// record. The message is stored, but without the record a sweeper may yet give the order up, so
// the buyer must not hear 202: it hears unavailable and retries with its key. Once the server is
// back the order ends, placed or given up, and its unit is sold once or back on sale.
func TestQueuedNoAcceptWithoutRecord(t *testing.T) {
	srv := natsServers(t, 1)[0]
	cfg := backendtest.Wiring{}.Config(t, config("queued"))
	cfg.Queue = orderqueue.Config{URLs: []string{srv.URL}, AckWait: time.Second}
	var orderID string
	cfg.Service.Hooks.Published = func(_ context.Context, id string) {
		orderID = id
		srv.Kill() // after the publish was acknowledged, before the record
	}
	inst := backendtest.Open(t, cfg, nil)
	sku := backendtest.SKU(t)
	ctx := context.Background()
	_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	_, _, err = inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: "queued"})
	require.ErrorIs(t, err, stock.ErrUnavailable, "no record of the order: a 202 would promise what a sweeper may take back")
	require.NotEmpty(t, orderID)

	require.NoError(t, srv.Start())
	var o stock.Order
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		o, err = inst.WaitOrder(ctx, orderID, 2*time.Second) // unavailable until the client reconnects
		require.NoError(c, err)
		require.NotEqual(c, stock.Queued, o.Status)
	}, 20*time.Second, 100*time.Millisecond, "the order in doubt never ended")
	assert.Contains(t, []stock.Status{stock.Confirmed, stock.Rejected}, o.Status, "the order in doubt ended")
	var placed []stock.Order
	if o.Status == stock.Confirmed {
		placed = append(placed, o)
	}
	settled(t, inst, sku)
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
}

// TestQueuedBoundsTheWaiting: with SECKILL_QUEUED_MAX_WAITING at 3 and the writers held in
// their section, three orders on one instance are accepted and a fourth, on another, is answered
// busy with units left and takes none — the bound is the product's, across instances. Once the
// writers go on, the three are placed and the fourth is accepted and placed too.
func TestQueuedBoundsTheWaiting(t *testing.T) {
	sku := backendtest.SKU(t)
	cfg := config("queued")
	cfg.QueuedMaxWaiting = 3
	release := make(chan struct{})
	cfg.Hooks.InSection = func(ctx context.Context, _ []stock.OrderRequest) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	insts := newInstances(t, 2, cfg, backendtest.Wiring{})
	t.Cleanup(free) // a test that fails early lets the writers go before its instances close
	ctx := context.Background()
	_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 10, MaxPerOrder: 1})
	require.NoError(t, err)
	order := func(inst backendtest.Instance, user string) (stock.Order, error) {
		o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued"})
		return o, err
	}
	var accepted []stock.Order
	for i := range 3 {
		o, err := order(insts[0], fmt.Sprintf("u-%d", i))
		require.NoError(t, err)
		accepted = append(accepted, o)
	}
	_, err = order(insts[1], "u-3")
	require.ErrorIs(t, err, stock.ErrBusy, "a fourth order waiting behind three, with the bound at 3")
	audit, err := insts[1].Audit(ctx, sku)
	require.NoError(t, err)
	require.NotNil(t, audit.Redis)
	require.NotNil(t, audit.Redis.Stock)
	assert.EqualValues(t, 7, *audit.Redis.Stock, "the busy answer took no unit")
	free()
	placed, rejected := backendtest.Ended(t, insts, accepted, 10*time.Second)
	assert.Len(t, placed, 3)
	assert.Empty(t, rejected)
	o, err := order(insts[1], "u-3")
	require.NoError(t, err, "accepted once the three were written")
	more, _ := backendtest.Ended(t, insts, []stock.Order{o}, 10*time.Second)
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, append(placed, more...))
}

// frozen is an instance that admitted an order and then stopped — before publishing it, or after —
// as a SIGKILL or a SIGSTOP would stop it: its ledger beat once, with a short TTL, and never
// again (unless the test makes it, beat), so that the live instances' sweepers soon find its
// reservation orphaned.
type frozen struct {
	ledger *admission.Ledger
	queue  *orderqueue.Queue
}

// frozenTTL is a frozen instance's heartbeat TTL.
const frozenTTL = 300 * time.Millisecond

func newFrozen(t *testing.T) frozen {
	t.Helper()
	ledger := admission.New(backendtest.Redis(t), backendtest.Store(t), "frozen", frozenTTL,
		slog.New(slog.DiscardHandler), prometheus.NewRegistry(), admission.Options{})
	ledger.Beat(context.Background())
	return frozen{ledger: ledger, queue: backendtest.OpenQueue(t, backendtest.QueueConfig(t), prometheus.NewRegistry())}
}

// beat keeps the instance beating, every quarter of its TTL as a live one does, until stop.
func (f frozen) beat() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tick := time.NewTicker(frozenTTL / 4); ; {
			f.ledger.Beat(ctx)
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// admit reserves one unit of sku for user under a fresh order id, as the queued strategy does.
func (f frozen) admit(t *testing.T, sku, user string) orderqueue.Order {
	t.Helper()
	id := ulid.Make().String()
	req := stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued", OrderID: id, Reservation: stock.Reservation{ID: id}}
	_, err := f.ledger.Admit(context.Background(), req)
	require.NoError(t, err)
	return orderqueue.Order{OrderID: id, SKU: sku, UserID: user, Quantity: 1, Strategy: "queued", Reservation: id, AcceptedAt: time.Now().UTC()}
}

// settled waits until admission holds no reservation of sku and its counter is the database's
// stock: every unit either sold or back on sale.
func settled(t *testing.T, inst backendtest.Instance, sku string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a, err := inst.Audit(context.Background(), sku)
		require.NoError(c, err)
		require.NotNil(c, a.Redis)
		require.NotNil(c, a.Redis.Stock)
		assert.Zero(c, a.Redis.Reservations, "reservations left")
		assert.Equal(c, a.Stock, *a.Redis.Stock, "admission's counter and the database")
		require.NotNil(c, a.Queued)
		assert.Zero(c, *a.Queued, "orders left in the queue")
	}, 10*time.Second, 50*time.Millisecond)
}

// onQueuedSale puts a product of units on sale on a live instance of the queued strategy, which
// sells one of them to "live" so that its sweeper watches the product.
func onQueuedSale(t *testing.T, units int64) (backendtest.Instance, string, stock.Order) {
	t.Helper()
	sku := backendtest.SKU(t)
	inst := newInstances(t, 1, config("queued"), backendtest.Wiring{})[0]
	ctx := context.Background()
	_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: units, MaxPerOrder: 1})
	require.NoError(t, err)
	o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "live", Quantity: 1, Strategy: "queued"})
	require.NoError(t, err)
	placed, _ := backendtest.Ended(t, []backendtest.Instance{inst}, []stock.Order{o}, 10*time.Second)
	require.Len(t, placed, 1)
	return inst, sku, placed[0]
}

// TestQueuedCrashBeforePublish: an instance admits an order and stops before it publishes it —
// Redis decremented, no message: the classic bug. Its reservation lapses with its heartbeat; the
// live sweeper finds no order and no record, records the order rejected, and the unit goes back
// on sale. If the instance was only frozen and publishes after all, the writer drops the
// message: the order is never placed, and nothing is returned twice.
func TestQueuedCrashBeforePublish(t *testing.T) {
	inst, sku, live := onQueuedSale(t, 2)
	f := newFrozen(t)
	ghost := f.admit(t, sku, "ghost")
	settled(t, inst, sku)
	ctx := context.Background()
	o, err := inst.Order(ctx, ghost.OrderID)
	require.NoError(t, err)
	assert.Equal(t, stock.Rejected, o.Status)
	assert.Equal(t, "unavailable", o.Reason)

	// The frozen instance wakes and publishes its order after all.
	_, err = f.queue.Publish(ctx, ghost)
	require.NoError(t, err)
	settled(t, inst, sku)
	o, err = inst.Order(ctx, ghost.OrderID)
	require.NoError(t, err)
	assert.Equal(t, stock.Rejected, o.Status, "the first record stands")
	placed, err := backendtest.Store(t).Placed(ctx, []string{ghost.OrderID})
	require.NoError(t, err)
	assert.Empty(t, placed, "the late message placed nothing")

	// The returned unit sells again.
	again, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "next", Quantity: 1, Strategy: "queued"})
	require.NoError(t, err)
	sold, _ := backendtest.Ended(t, []backendtest.Instance{inst}, []stock.Order{again}, 10*time.Second)
	require.Len(t, sold, 1)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, []stock.Order{live, sold[0]})
	assert.Zero(t, a.Stock)
}

// TestQueuedCrashAfterPublish: an instance admits an order, publishes it and stops before it
// records it or answers. The message waits; the writer and the sweeper race for the order's
// first record, and exactly one ending follows, the first record's — never both, never
// neither. Each way is made to happen: the writer first (the instance still beats while the
// message reaches a writer, as a slow one would), and the sweeper first (the message reaches a
// writer only once the sweeper has given the order up).
func TestQueuedCrashAfterPublish(t *testing.T) {
	for _, writerFirst := range []bool{true, false} {
		name := map[bool]string{true: "a writer records first", false: "the sweeper records first"}[writerFirst]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			inst, sku, live := onQueuedSale(t, 2)
			f := newFrozen(t)
			ghost := f.admit(t, sku, "ghost")
			if writerFirst {
				stop := f.beat()
				_, err := f.queue.Publish(ctx, ghost)
				require.NoError(t, err)
				o, err := inst.WaitOrder(ctx, ghost.OrderID, 10*time.Second)
				stop()
				require.NoError(t, err)
				require.NotEqual(t, stock.Queued, o.Status, "no writer ended the order")
			} else {
				require.Eventually(t, func() bool {
					o, err := inst.Order(ctx, ghost.OrderID)
					return err == nil && o.Status == stock.Rejected
				}, 10*time.Second, 10*time.Millisecond, "the sweeper never gave the order up")
				_, err := f.queue.Publish(ctx, ghost)
				require.NoError(t, err)
			}
			settled(t, inst, sku)
			o, err := inst.Order(ctx, ghost.OrderID)
			require.NoError(t, err)
			acked := []stock.Order{live}
			if writerFirst {
				require.True(t, o.Status.Active(), "placed by the writer that recorded it first: %s", o.Status)
				acked = append(acked, o)
			} else {
				require.Equal(t, stock.Rejected, o.Status, "rejected by the sweeper that recorded it first")
				assert.Equal(t, "unavailable", o.Reason)
				placed, err := backendtest.Store(t).Placed(ctx, []string{ghost.OrderID})
				require.NoError(t, err)
				assert.Empty(t, placed, "the message that came after placed nothing")
			}
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, acked)
			assert.EqualValues(t, 2-len(acked), a.Stock, "the rejected order's unit back on sale")
		})
	}
}

// TestQueuedRedeliveredPlacedOrder: a writer committed an order and stopped before its ack, so
// its message comes again. The writer that takes it finds the order in the database and acks it,
// with no second row and no second unit.
func TestQueuedRedeliveredPlacedOrder(t *testing.T) {
	inst, sku, live := onQueuedSale(t, 3)
	ctx := context.Background()
	q := backendtest.OpenQueue(t, backendtest.QueueConfig(t), prometheus.NewRegistry())
	again := orderqueue.Order{OrderID: live.OrderID, SKU: sku, UserID: live.UserID, Quantity: 1, Strategy: "queued",
		Reservation: live.OrderID, AcceptedAt: live.CreatedAt}
	// The same order once more, past the de-duplication (which a real redelivery never meets):
	// another message id, the same order.
	nc, err := nats.Connect(backendtest.NATSURL(t))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	data, err := json.Marshal(again)
	require.NoError(t, err)
	_, err = js.Publish(ctx, q.Subject(sku), data, jetstream.WithMsgID("redelivery-"+live.OrderID))
	require.NoError(t, err)
	settled(t, inst, sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, []stock.Order{live})
	assert.EqualValues(t, 2, a.Stock, "one unit sold, once")
	o, err := inst.Order(ctx, live.OrderID)
	require.NoError(t, err)
	assert.True(t, o.Status.Active())
}

// TestQueuedSweeperLeavesQueuedOrders is the trap of the queued design: once an order's
// message is out, its admitting instance may die while the message waits for a writer. The
// sweeper must not give that unit back to sale meanwhile — the unit would be sold twice in Redis,
// queued and active orders above the stock — but leave it to the writer. Here the instance
// records the order and stops, its message not yet out: once its lease has lapsed, the live
// instance's sweeper hands the reservation over to the queue (its writers resolve it) with the
// unit still held; once the order has been queued two AckWaits with no writer ending it, the
// live instance sends its message again (the queue lost it, as far as anyone can tell), and a
// writer places it. The unit never went back on sale, and the original message, sent late,
// places nothing twice.
func TestQueuedSweeperLeavesQueuedOrders(t *testing.T) {
	inst, sku, live := onQueuedSale(t, 2)
	f := newFrozen(t)
	ctx := context.Background()
	ghost := f.admit(t, sku, "ghost")
	_, err := f.queue.Record(ctx, orderqueue.Record{Order: ghost, State: orderqueue.Queued})
	require.NoError(t, err)
	rdb := backendtest.Redis(t)
	require.Eventually(t, func() bool {
		held, err := rdb.HGet(ctx, admission.KeysOf(sku).Queued, "ghost").Result()
		return err == nil && strings.HasPrefix(held, ghost.OrderID+"|") && strings.Contains(held, "|"+admission.QueueOwner+"|")
	}, 10*time.Second, 5*time.Millisecond, "the sweeper never handed the queued order's reservation over to the queue")
	a, err := inst.Audit(ctx, sku)
	require.NoError(t, err)
	require.NotNil(t, a.Redis)
	assert.EqualValues(t, 1, a.Redis.Reservations, "the queued order's reservation holds")
	assert.EqualValues(t, 0, *a.Redis.Stock, "the queued order's unit is not on sale")

	settled(t, inst, sku)
	o, err := inst.Order(ctx, ghost.OrderID)
	require.NoError(t, err)
	require.True(t, o.Status.Active(), "placed once its message was sent again: %s", o.Status)
	_, err = f.queue.Publish(ctx, ghost)
	require.NoError(t, err)
	settled(t, inst, sku)
	for _, result := range []string{"returned", "retaken"} {
		assert.Zero(t, backendtest.Counter(t, "seckill_admission_swept_total", map[string]string{"result": result}, inst),
			"the queued order's unit went back on sale (%s)", result)
	}
	a2 := backendtest.RequireInvariant(t, backendtest.Store(t), sku, []stock.Order{live, o})
	assert.Zero(t, a2.Stock)
}

// queuedSaleUnder sells units to buyers arriving one every 10 ms over insts with the queued
// strategy, and injects a fault once units/4 orders are accepted, while buyers keep arriving. A
// buyer told busy or unavailable retries with the same Idempotency-Key, as a client that cannot
// know whether its order went out must: it finds the order if it did. Any answer but those, an
// order or sold_out fails the test: no fault may make a 500. It returns the orders accepted,
// every answer heard (retries included), and when the fault's injection returned.
func queuedSaleUnder(t *testing.T, insts []backendtest.Instance, sku string, units, buyers int, inject func()) ([]stock.Order, map[string]int, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: int64(units), MaxPerOrder: 1})
	require.NoError(t, err)
	var (
		mu           sync.Mutex
		accepted     []stock.Order
		outcomes     = map[string]int{}
		faulted      time.Time
		once         sync.Once
		wg, injected sync.WaitGroup
	)
	for i := range buyers {
		wg.Go(func() {
			inst := insts[i%len(insts)]
			user := fmt.Sprintf("user-%03d", i)
			req := stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued", IdempotencyKey: sku + "/" + user}
			time.Sleep(time.Duration(i) * 10 * time.Millisecond) // its arrival: the sale goes on while the fault holds
			for ctx.Err() == nil {
				o, _, err := inst.PlaceOrder(ctx, req)
				mu.Lock()
				outcomes[stock.Code(err)]++
				if err == nil {
					accepted = append(accepted, o)
					if len(accepted) == units/4 {
						once.Do(func() {
							injected.Go(func() {
								inject()
								mu.Lock()
								faulted = time.Now()
								mu.Unlock()
							})
						})
					}
				}
				mu.Unlock()
				switch stock.Code(err) {
				case "ok", "sold_out":
					return
				case "busy", "unavailable":
				default:
					t.Errorf("%s: answered %s under the fault: %v", user, stock.Code(err), err)
					return
				}
				time.Sleep(20*time.Millisecond + rand.N(30*time.Millisecond))
			}
		})
	}
	wg.Wait()
	injected.Wait()
	t.Logf("answers, retries included: %v", outcomes)
	return accepted, outcomes, faulted
}

// natsServers starts n nats-server processes, one cluster (or a lone server), for t alone, and
// kills them when it ends; without the binary the test fails when backends are required and
// skips, saying so, otherwise.
func natsServers(t *testing.T, n int) []*natsserver.Server {
	t.Helper()
	if err := natsserver.Available(); err != nil {
		if backendtest.Required() {
			t.Fatalf("nats-server is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skip(err)
	}
	servers, err := natsserver.New(t.TempDir(), n)
	require.NoError(t, err)
	require.NoError(t, natsserver.StartAll(servers))
	t.Cleanup(func() { natsserver.Kill(servers...) })
	t.Cleanup(func() {
		if t.Failed() {
			for _, srv := range servers {
				queueState(t, srv)
			}
		}
	})
	return servers
}

// queueState logs what srv holds of the default order queue — the stream's sequences and
// messages, the writers' consumer's delivered and acked floor — and the warnings in its log: what
// a failed test needs to tell a lost ack from a stream that restarted behind its consumer.
func queueState(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if nc, err := nats.Connect(srv.URL, nats.Timeout(time.Second), nats.NoReconnect()); err == nil {
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if st, err := js.Stream(ctx, orderqueue.DefaultStream); err == nil {
			t.Logf("%s: stream %+v", srv.URL, st.CachedInfo().State)
			if c, err := st.Consumer(ctx, orderqueue.DefaultConsumer); err == nil {
				ci := c.CachedInfo()
				t.Logf("%s: consumer delivered %+v, ack floor %+v, pending %d, ack pending %d, redelivered %d",
					srv.URL, ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
			}
		}
	}
	log, _ := os.ReadFile(filepath.Join(srv.Dir, "server.log"))
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "[WRN]") || strings.Contains(line, "[ERR]") {
			t.Logf("%s: %s", srv.URL, strings.TrimSpace(line))
		}
	}
}

// TestQueuedNATSRestart kills the queue's server (SIGKILL) mid-sale and starts it again on its
// store three seconds later. A publish retries, with the same id, for its budget (2 s); past it
// orders are refused as unavailable — never accepted and lost — and admission's units of those
// whose publish was cut off come back (the sweeper asks the queue once it answers again). A 202
// is durable: every order accepted before or after the kill ends placed within 10 s of the
// restart (none rejected: the stock outlasts them), every unit sells, and the invariant holds.
func TestQueuedNATSRestart(t *testing.T) {
	servers := natsServers(t, 1)
	srv := servers[0]
	var insts []backendtest.Instance
	for range instances {
		c := backendtest.Wiring{}.Config(t, config("queued"))
		c.Queue = orderqueue.Config{URLs: []string{srv.URL}, AckWait: time.Second}
		insts = append(insts, backendtest.Open(t, c, nil))
	}
	sku := backendtest.SKU(t)
	const units = 40
	accepted, outcomes, restarted := queuedSaleUnder(t, insts, sku, units, 3*units, func() {
		srv.Kill()
		time.Sleep(3 * time.Second) // the outage: its length is the fault
		assert.NoError(t, srv.Start())
	})
	placed, rejected := backendtest.Ended(t, insts, accepted, time.Until(restarted.Add(10*time.Second)))
	assert.Empty(t, rejected, "orders answered 202 and then rejected: the queue's crash took what it had acknowledged")
	assert.Positive(t, outcomes["unavailable"], "no order was refused while the queue was down: the fault missed the sale")
	settled(t, insts[0], sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.Equal(t, units, len(placed)+int(a.Stock), "every unit sold to one accepted order, or back on sale")
	assert.LessOrEqual(t, int(a.Stock), len(rejected), "units on sale that no rejected order gave back")
}

// TestQueuedClusterLosesANode kills (SIGKILL) the node that leads the order stream of a
// three-node JetStream cluster mid-sale. The stream, the writers' consumer and the records are
// replicated on all three; the other two elect new leaders, and the instances, connected to the
// whole cluster, carry on. Orders answer 503 while leaders move and are retried with their key;
// every order accepted ends placed within 10 s of the kill (a 202 is durable: none rejected),
// every unit sells once, and the invariant holds.
func TestQueuedClusterLosesANode(t *testing.T) {
	t.Parallel() // servers of its own: beside the other cluster tests, after the rest
	servers := natsServers(t, 3)
	var insts []backendtest.Instance
	for range instances {
		c := backendtest.Wiring{}.Config(t, config("queued"))
		c.Queue = orderqueue.Config{URLs: natsserver.URLs(servers...), AckWait: time.Second}
		insts = append(insts, backendtest.Open(t, c, nil))
	}
	sku := backendtest.SKU(t)
	const units = 40
	var leader string
	accepted, outcomes, killed := queuedSaleUnder(t, insts, sku, units, 3*units, func() {
		leader = streamLeader(t, servers)
		for _, s := range servers {
			if s.Name == leader {
				s.Kill()
			}
		}
	})
	t.Logf("killed %s, the stream's leader; answers %v", leader, outcomes)
	placed, rejected := backendtest.Ended(t, insts, accepted, time.Until(killed.Add(10*time.Second)))
	t.Logf("the queue's events on the instances: %v", queueEvents(t, insts))
	assert.Empty(t, rejected, "orders answered 202 and then rejected: the lost node took what the cluster had acknowledged")
	settled(t, insts[0], sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.Equal(t, units, len(placed)+int(a.Stock), "every unit sold to one accepted order, or back on sale")
	assert.LessOrEqual(t, int(a.Stock), len(rejected), "units on sale that no rejected order gave back")
}

// queueEvents sums seckill_queue_orders_total by event over insts: how many messages were
// redelivered, or sent again, on the way.
func queueEvents(t *testing.T, insts []backendtest.Instance) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, in := range insts {
		families, err := in.Metrics.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != "seckill_queue_orders_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "event" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}

// streamLeader names the member of servers that leads the order stream.
func streamLeader(t *testing.T, servers []*natsserver.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(strings.Join(natsserver.URLs(servers...), ","), nats.Timeout(time.Second))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, orderqueue.DefaultStream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	require.NotEmpty(t, info.Cluster.Leader)
	return info.Cluster.Leader
}

// TestQueuedRedisFlushed flushes admission's Redis mid-sale: the reservations of queued orders
// are gone and the counter is warmed again from the database, which does not yet count the
// orders still queued — so admission accepts more than the stock for a while, and the writers
// reject the excess as sold_out. Every accepted order still ends within 10 s of the flush,
// placed or rejected, and the database never sells a unit twice.
func TestQueuedRedisFlushed(t *testing.T) {
	rp := backendtest.StartRedis(t)
	insts := newInstances(t, instances, config("queued"), backendtest.Wiring{RedisAddrs: []string{rp.Addr}})
	sku := backendtest.SKU(t)
	const units = 40
	accepted, _, flushed := queuedSaleUnder(t, insts, sku, units, 3*units, func() {
		assert.NoError(t, redis.NewClient(&redis.Options{Addr: rp.Addr}).FlushAll(context.Background()).Err())
	})
	placed, rejected := backendtest.Ended(t, insts, accepted, time.Until(flushed.Add(10*time.Second)))
	t.Logf("%d accepted: %d placed, %d rejected", len(accepted), len(placed), len(rejected))
	for id, reason := range rejected {
		assert.Equal(t, "sold_out", reason, "order %s", id)
	}
	assert.Len(t, placed, units, "every unit sold, each to one accepted order")
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.Zero(t, a.Stock)
}
