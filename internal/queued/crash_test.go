package queued_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

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
	return newFrozenOn(t, backendtest.QueueConfig(t))
}

// newFrozenOn is newFrozen with its queue on cfg.
func newFrozenOn(t *testing.T, cfg orderqueue.Config) frozen {
	t.Helper()
	ledger := admission.New(backendtest.Redis(t), backendtest.Store(t), "frozen", frozenTTL,
		slog.New(slog.DiscardHandler), prometheus.NewRegistry(), admission.Options{})
	ledger.Beat(context.Background())
	return frozen{ledger: ledger, queue: backendtest.OpenQueue(t, cfg, prometheus.NewRegistry())}
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

// admit reserves one unit of sku for user under an order id minted in a batch of its own, as the
// queued strategy does, and returns the batch.
func (f frozen) admit(t *testing.T, sku, user string) orderqueue.Batch {
	t.Helper()
	b := orderqueue.NewBatch(sku)
	f.add(t, &b, stock.OrderOf(stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued"}))
	return b
}

// add admits req, one unit per line, as the queued strategy does — every line reserved under an
// id minted in b — and adds it to b.
func (f frozen) add(t *testing.T, b *orderqueue.Batch, req stock.CheckoutRequest) {
	t.Helper()
	id := b.NewID()
	lines := req.Admitted()
	o := orderqueue.Order{OrderID: id, Checkout: !req.Order, SKU: lines[0].SKU, UserID: req.UserID, Strategy: "queued", Reservation: id,
		AcceptedAt: time.Now().UTC()}
	for i := range lines {
		lines[i].Strategy, lines[i].Reservation, lines[i].OrderID = "queued", stock.Reservation{ID: id}, id
		if !req.Order {
			lines[i].OrderID = ulid.Make().String()
		}
		o.Lines = append(o.Lines, orderqueue.Line{OrderID: lines[i].OrderID, SKU: lines[i].SKU, Quantity: lines[i].Quantity})
	}
	_, err := f.ledger.Admit(context.Background(), lines, 0)
	require.NoError(t, err)
	b.Orders = append(b.Orders, o)
}

// settled waits until admission holds no reservation of sku and its counter is the database's
// stock — every unit either sold or back on sale — and the queue holds no message of sku.
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
		assert.Zero(c, *a.Queued, "orders left queued")
		assert.Zero(c, backendtest.Gauges(t, "seckill_queue_depth", map[string]string{"sku": sku}, inst), "messages left in the queue")
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
	id := ghost.Orders[0].OrderID
	settled(t, inst, sku)
	ctx := context.Background()
	o, err := inst.Order(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, stock.Rejected, o.Status)
	assert.Equal(t, "unavailable", o.Reason)

	// The frozen instance wakes and publishes its order after all.
	_, err = f.queue.Publish(ctx, ghost)
	require.NoError(t, err)
	settled(t, inst, sku)
	o, err = inst.Order(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, stock.Rejected, o.Status, "the first record stands")
	placed, err := backendtest.Store(t).Placed(ctx, []string{id})
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
			id := ghost.Orders[0].OrderID
			if writerFirst {
				stop := f.beat()
				_, err := f.queue.Publish(ctx, ghost)
				require.NoError(t, err)
				o, err := inst.WaitOrder(ctx, id, 10*time.Second)
				stop()
				require.NoError(t, err)
				require.NotEqual(t, stock.Queued, o.Status, "no writer ended the order")
			} else {
				require.Eventually(t, func() bool {
					o, err := inst.Order(ctx, id)
					return err == nil && o.Status == stock.Rejected
				}, 10*time.Second, 10*time.Millisecond, "the sweeper never gave the order up")
				_, err := f.queue.Publish(ctx, ghost)
				require.NoError(t, err)
			}
			settled(t, inst, sku)
			o, err := inst.Order(ctx, id)
			require.NoError(t, err)
			acked := []stock.Order{live}
			if writerFirst {
				require.True(t, o.Status.Active(), "placed by the writer that recorded it first: %s", o.Status)
				acked = append(acked, o)
			} else {
				require.Equal(t, stock.Rejected, o.Status, "rejected by the sweeper that recorded it first")
				assert.Equal(t, "unavailable", o.Reason)
				placed, err := backendtest.Store(t).Placed(ctx, []string{id})
				require.NoError(t, err)
				assert.Empty(t, placed, "the message that came after placed nothing")
			}
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, acked)
			assert.EqualValues(t, 2-len(acked), a.Stock, "the rejected order's unit back on sale")
		})
	}
}

// TestQueuedRedeliveredPlacedOrder: a writer committed an order and stopped before its ack, so
// its batch comes again. The writer that takes it finds the order in the database and acks it,
// with no second row and no second unit.
func TestQueuedRedeliveredPlacedOrder(t *testing.T) {
	inst, sku, live := onQueuedSale(t, 3)
	ctx := context.Background()
	republish(t, batchOf(t, orderqueue.Order{OrderID: live.OrderID, SKU: sku, UserID: live.UserID, Strategy: "queued",
		Reservation: live.OrderID, AcceptedAt: live.CreatedAt, Lines: []orderqueue.Line{{OrderID: live.OrderID, SKU: sku, Quantity: 1}}}),
		"redelivery-"+live.OrderID)
	settled(t, inst, sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, []stock.Order{live})
	assert.EqualValues(t, 2, a.Stock, "one unit sold, once")
	o, err := inst.Order(ctx, live.OrderID)
	require.NoError(t, err)
	assert.True(t, o.Status.Active())
}

// batchOf is the batch o was minted in, holding o alone.
func batchOf(t *testing.T, o orderqueue.Order) orderqueue.Batch {
	t.Helper()
	id, ok := orderqueue.BatchOf(o.OrderID)
	require.True(t, ok, "%s names no batch", o.OrderID)
	return orderqueue.Batch{ID: id, SKU: o.SKU, Orders: []orderqueue.Order{o}}
}

// republish sends b's message once more, past the de-duplication (which a real redelivery never
// meets): another message id, the same batch.
func republish(t *testing.T, b orderqueue.Batch, msgID string) {
	t.Helper()
	q := backendtest.OpenQueue(t, backendtest.QueueConfig(t), prometheus.NewRegistry())
	nc, err := nats.Connect(backendtest.NATSURL(t))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	data, err := json.Marshal(b)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), q.Subject(b.SKU), data, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
}

// TestQueuedSweeperLeavesQueuedOrders is the trap of the queued design: once an order's
// message is out, its admitting instance may die while the message waits for a writer. The
// sweeper must not give that unit back to sale meanwhile — the unit would be sold twice in Redis,
// queued and active orders above the stock — but leave it to the writer. Here the instance
// records the order and stops, its message not yet out: once its lease has lapsed, the live
// instance's sweeper hands the reservation over to the queue (its writers resolve it) with the
// unit still held; once the order has been queued two AckWaits with no writer ending it, the
// live instance sends its batch again (the queue lost its message, as far as anyone can tell),
// and a writer places it. The unit never went back on sale, and the original message, sent late,
// places nothing twice.
func TestQueuedSweeperLeavesQueuedOrders(t *testing.T) {
	inst, sku, live := onQueuedSale(t, 2)
	f := newFrozen(t)
	ctx := context.Background()
	ghost := f.admit(t, sku, "ghost")
	id := ghost.Orders[0].OrderID
	_, err := f.queue.Record(ctx, orderqueue.BatchRecord{Batch: ghost, State: orderqueue.Queued})
	require.NoError(t, err)
	rdb := backendtest.Redis(t)
	require.Eventually(t, func() bool {
		held, err := rdb.HGet(ctx, admission.KeysOf(sku).Queued, "ghost").Result()
		return err == nil && strings.HasPrefix(held, id+"|") && strings.Contains(held, "|"+admission.QueueOwner+"|")
	}, 10*time.Second, 5*time.Millisecond, "the sweeper never handed the queued order's reservation over to the queue")
	a, err := inst.Audit(ctx, sku)
	require.NoError(t, err)
	require.NotNil(t, a.Redis)
	assert.EqualValues(t, 1, a.Redis.Reservations, "the queued order's reservation holds")
	assert.EqualValues(t, 0, *a.Redis.Stock, "the queued order's unit is not on sale")

	settled(t, inst, sku)
	o, err := inst.Order(ctx, id)
	require.NoError(t, err)
	require.True(t, o.Status.Active(), "placed once its batch was sent again: %s", o.Status)
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

// TestQueuedRejectedUnitsReturn: a writer recorded an order rejected and its give-back did not
// reach Redis (it acks the message all the same), so the reservation stays in the queue's hands,
// which no sweeper lists. The order's unit comes back on sale anyway, and the next buyer gets it.
func TestQueuedRejectedUnitsReturn(t *testing.T) {
	inst, sku, _ := onQueuedSale(t, 2)
	ctx := context.Background()
	f := newFrozen(t)
	b := f.admit(t, sku, "u-1")
	o := b.Orders[0]
	req := stock.OrderRequest{SKU: sku, UserID: o.UserID, Quantity: 1, OrderID: o.OrderID, Reservation: stock.Reservation{ID: o.Reservation}}
	require.NoError(t, f.ledger.HandOver(ctx, sku, []stock.OrderRequest{req}))
	_, err := f.queue.Record(ctx, orderqueue.BatchRecord{Batch: b, State: orderqueue.Queued, Rejected: map[string]string{o.OrderID: "sold_out"}})
	require.NoError(t, err)
	settled(t, inst, sku)
	next, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-2", Quantity: 1, Strategy: "queued"})
	require.NoError(t, err, "the rejected order's unit is on sale again")
	placed, _ := backendtest.Ended(t, []backendtest.Instance{inst}, []stock.Order{next}, 10*time.Second)
	require.Len(t, placed, 1)
}
