package queued_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/queued"
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
	// Which two is left open: a batch that comes back (naked) is written after later ones.
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
				sweeper := queued.Pending{Queue: backendtest.OpenQueue(t, backendtest.QueueConfig(t), prometheus.NewRegistry())}
				// A sweeper's question, before the message can reach a writer.
				cfg.Hooks.Admitted = func(ctx context.Context, orderID string) {
					writable, err := sweeper.Pending(ctx, sku, []admission.Held{{ID: orderID, User: "u-1", Units: 1}})
					assert.NoError(t, err)
					assert.False(t, writable[orderID], "the sweeper's record came first")
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

// TestQueuedNoAcceptWithoutRecord: the queue's server dies while a batch is on its way — before
// its publish returned, or between its publish and its record. Before the publish returned the
// message may or may not be stored; after it, it is, but without the record a sweeper may yet
// give the batch up. Either way the buyer must not hear 202: it hears unavailable and retries with
// its key. Once the server is back the order ends, placed or given up, and its unit is sold once
// or back on sale.
func TestQueuedNoAcceptWithoutRecord(t *testing.T) {
	for _, c := range []struct {
		moment string
		says   string
	}{
		{"before its publish returned", "no 202 before its batch is stored: a queue server's crash would take it back"},
		{"before its record", "no record of the order: a 202 would promise what a sweeper may take back"},
	} {
		t.Run(c.moment, func(t *testing.T) {
			srv := natsServers(t, 1)[0]
			cfg := backendtest.Wiring{}.Config(t, config("queued"))
			cfg.Queue = backendtest.QueueOn(srv.URL)
			var orderID string
			kill := func(_ context.Context, id string) {
				orderID = id
				srv.Kill()
			}
			if c.moment == "before its publish returned" {
				cfg.Service.Hooks.Admitted = kill
			} else {
				cfg.Service.Hooks.Published = kill // acknowledged, not yet recorded
			}
			inst := backendtest.Open(t, cfg, nil)
			sku := backendtest.SKU(t)
			ctx := context.Background()
			_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
			require.NoError(t, err)
			_, _, err = inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: "queued"})
			require.ErrorIs(t, err, stock.ErrUnavailable, c.says)
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
		})
	}
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

// TestWriterReadsNoRecordItNeedNot: a batch handed over to the queue by its publisher — its
// record stood queued — is written on its first delivery without its writer reading that record:
// here the record is deleted as the writer takes the batch, and the writer does not write it
// again, as a claim would (orderqueue.Queue.Claim).
func TestWriterReadsNoRecordItNeedNot(t *testing.T) {
	cfg := backendtest.Wiring{}.Config(t, config("queued"))
	cfg.Queue = backendtest.QueueConfig(t)
	nc, err := nats.Connect(cfg.Queue.URLs[0])
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var (
		records  jetstream.KeyValue // once the instance declared it
		taken    atomic.Int32
		accepted = make(chan struct{}) // the 202: the record stood, the reservation handed over
	)
	cfg.Service.Hooks.Taken = func(ctx context.Context, orderID string) {
		taken.Add(1)
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			t.Error("the order was never accepted")
		}
		batch, ok := orderqueue.BatchOf(orderID)
		assert.True(t, ok)
		assert.NoError(t, records.Delete(ctx, batch))
	}
	inst := backendtest.Open(t, cfg, nil)
	ctx := context.Background()
	records, err = js.KeyValue(ctx, cfg.Queue.Bucket)
	require.NoError(t, err)
	sku := backendtest.SKU(t)
	_, err = inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: "queued"})
	require.NoError(t, err)
	close(accepted)
	placed, rejected := backendtest.Ended(t, []backendtest.Instance{inst}, []stock.Order{o}, 10*time.Second)
	require.Len(t, placed, 1, "rejected: %v", rejected)
	assert.Equal(t, int32(1), taken.Load(), "one delivery")
	batch, _ := orderqueue.BatchOf(o.OrderID)
	_, err = records.Get(ctx, batch)
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the writer read the batch's record, found none and wrote it")
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	settled(t, inst, sku)
}

// TestQueuedAuditCountsOrdersOnce: the audit's queued counts an accepted order until it is
// written, and never beside its row. Held in its writer's section, the order is queued and not
// one of the product's orders; held after its commit, its reservation not yet settled and its
// message not yet acked (the queue's depth still counts it), it is one of the orders and not
// queued. A queued checkout counts under each of its products.
func TestQueuedAuditCountsOrdersOnce(t *testing.T) {
	ctx := context.Background()
	audit := func(t *testing.T, inst backendtest.Instance, sku string) (orders, queued int64) {
		t.Helper()
		a, err := inst.Audit(ctx, sku)
		require.NoError(t, err)
		require.NotNil(t, a.Queued, "the audit counts what is queued")
		return a.Orders, *a.Queued
	}
	t.Run("an order", func(t *testing.T) {
		sku := backendtest.SKU(t)
		cfg := config("queued")
		hooks, inside, release := backendtest.HoldSection("u-1")
		defer release()
		cfg.Hooks = hooks
		written, settled := make(chan struct{}), make(chan struct{})
		settle := sync.OnceFunc(func() { close(settled) })
		defer settle()
		var once sync.Once
		cfg.Hooks.Written = func(ctx context.Context, _ []stock.OrderRequest) {
			once.Do(func() {
				close(written)
				select {
				case <-settled:
				case <-ctx.Done():
				}
			})
		}
		inst := newInstances(t, 1, cfg, backendtest.Wiring{})[0]
		_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
		require.NoError(t, err)
		o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: "queued"})
		require.NoError(t, err)
		<-inside
		orders, queued := audit(t, inst, sku)
		assert.Equal(t, [2]int64{0, 1}, [2]int64{orders, queued}, "in its writer's section: queued, not yet an order")
		release()
		<-written
		orders, queued = audit(t, inst, sku)
		assert.Equal(t, [2]int64{1, 0}, [2]int64{orders, queued}, "written and not yet settled: one of the product's orders, not queued")
		assert.Equal(t, 1.0, backendtest.Gauges(t, "seckill_queue_depth", map[string]string{"sku": sku}, inst),
			"its message not yet acked: still in the stream, which the queue's depth counts")
		settle()
		placed, _ := backendtest.Ended(t, []backendtest.Instance{inst}, []stock.Order{o}, 10*time.Second)
		require.Len(t, placed, 1)
		orders, queued = audit(t, inst, sku)
		assert.Equal(t, [2]int64{1, 0}, [2]int64{orders, queued}, "placed")
	})
	t.Run("a checkout", func(t *testing.T) {
		base := backendtest.SKU(t)
		a, b := base+"-a", base+"-b"
		cfg := config("queued")
		hooks, inside, release := backendtest.HoldSection("u-1")
		defer release()
		cfg.Hooks = hooks
		inst := newInstances(t, 1, cfg, backendtest.Wiring{})[0]
		for _, sku := range []string{a, b} {
			_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
			require.NoError(t, err)
		}
		co, _, err := inst.Place(ctx, stock.CheckoutRequest{UserID: "u-1", Strategy: "queued",
			Lines: []stock.OrderRequest{{SKU: b, Quantity: 1}, {SKU: a, Quantity: 1}}})
		require.NoError(t, err)
		<-inside
		for _, sku := range []string{a, b} {
			orders, queued := audit(t, inst, sku)
			assert.Equal(t, [2]int64{0, 1}, [2]int64{orders, queued}, "%s: the checkout queued under each of its products", sku)
		}
		release()
		co, err = inst.WaitCheckout(ctx, co.CheckoutID, 10*time.Second)
		require.NoError(t, err)
		require.True(t, co.Status.Active(), "placed: %+v", co)
		for _, sku := range []string{a, b} {
			orders, queued := audit(t, inst, sku)
			assert.Equal(t, [2]int64{1, 0}, [2]int64{orders, queued}, "%s: placed", sku)
		}
	})
}
