package queued_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/queued"
	"github.com/flashsale/seckill/internal/stock"
)

// TestQueuedCheckoutGivenUp: every line of a queued checkout holds its reservation under the
// checkout's id, so that a sweeper that finds one line's reservation orphaned (its instance froze
// before the checkout was recorded queued) decides for the whole checkout with its one record.
// Swept before its publish or between its publish and its record, the checkout is never
// accepted: the buyer hears unavailable, no line is written — not the swept product's, nor the
// other's, whose writer may still take the message — and every line's unit is on sale again.
func TestQueuedCheckoutGivenUp(t *testing.T) {
	for _, moment := range []string{"before its publish", "before its record"} {
		t.Run(moment, func(t *testing.T) {
			base := backendtest.SKU(t)
			a, b := base+"-a", base+"-b"
			sweeper := queued.Pending{Queue: backendtest.OpenQueue(t, backendtest.QueueConfig(t), prometheus.NewRegistry())}
			var first sync.Once
			swept := make(chan struct{})
			sweep := func(ctx context.Context, id string) {
				first.Do(func() {
					defer close(swept)
					// What a sweeper asks about the orphaned reservation of one line, product b.
					writable, err := sweeper.Pending(ctx, b, []admission.Held{{ID: id, User: "u-1", Units: 1}})
					assert.NoError(t, err)
					assert.False(t, writable[id], "the sweeper's record came first")
				})
			}
			cfg := config("queued")
			if moment == "before its publish" {
				cfg.Hooks.Admitted = sweep
			} else {
				cfg.Hooks.Published = sweep
				// The sweeper first: a writer that took the message at once would claim it
				// ahead of the sweeper, and the checkout would be accepted.
				cfg.Hooks.Taken = func(ctx context.Context, _ string) {
					select {
					case <-swept:
					case <-ctx.Done():
					}
				}
			}
			inst := newInstances(t, 1, cfg, backendtest.Wiring{})[0]
			ctx := context.Background()
			for _, sku := range []string{a, b} {
				_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
				require.NoError(t, err)
			}
			req := stock.CheckoutRequest{UserID: "u-1", Strategy: "queued",
				Lines: []stock.OrderRequest{{SKU: b, Quantity: 1}, {SKU: a, Quantity: 1}}}
			_, _, err := inst.Place(ctx, req)
			require.ErrorIs(t, err, stock.ErrUnavailable, "given up before it was recorded queued: never accepted")
			for _, sku := range []string{a, b} {
				settled(t, inst, sku)
				p, err := inst.Product(ctx, sku)
				require.NoError(t, err)
				assert.EqualValues(t, 1, p.Stock, "%s: no line written", sku)
			}
			req.UserID = "u-2"
			co, _, err := inst.Place(ctx, req)
			require.NoError(t, err, "every line's unit is on sale again")
			co, err = inst.WaitCheckout(ctx, co.CheckoutID, 10*time.Second)
			require.NoError(t, err)
			assert.True(t, co.Status.Active(), "placed: %+v", co)
			backendtest.RequireWholeCheckouts(t, backendtest.Store(t), backendtest.SQL(t), []string{a, b}, map[string]int{"u-2": 2}, []stock.Checkout{co})
		})
	}
}

// TestQueuedRedeliveredPlacedCheckout is TestQueuedRedeliveredPlacedOrder for a checkout: its
// writer committed every line and stopped before its ack, so its message comes again. The writer
// that takes it finds the checkout in the database and acks its batch: no second line, no second unit,
// and the checkout stays placed — never rejected behind its buyer's rows.
func TestQueuedRedeliveredPlacedCheckout(t *testing.T) {
	base := backendtest.SKU(t)
	a, b := base+"-a", base+"-b"
	inst := newInstances(t, 1, config("queued"), backendtest.Wiring{})[0]
	ctx := context.Background()
	for _, sku := range []string{a, b} {
		_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 3, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	req := stock.CheckoutRequest{UserID: "u-1", Strategy: "queued",
		Lines: []stock.OrderRequest{{SKU: b, Quantity: 1}, {SKU: a, Quantity: 1}}}
	co, _, err := inst.Place(ctx, req)
	require.NoError(t, err)
	co, err = inst.WaitCheckout(ctx, co.CheckoutID, 10*time.Second)
	require.NoError(t, err)
	require.True(t, co.Status.Active(), "placed: %+v", co)

	again := orderqueue.Order{OrderID: co.CheckoutID, Checkout: true, SKU: co.Lines[0].SKU, UserID: co.UserID, Strategy: "queued",
		Reservation: co.CheckoutID, AcceptedAt: co.CreatedAt}
	for _, l := range co.Lines {
		again.Lines = append(again.Lines, orderqueue.Line{OrderID: l.OrderID, SKU: l.SKU, Quantity: l.Quantity})
	}
	republish(t, batchOf(t, again), "redelivery-"+co.CheckoutID)
	for _, sku := range []string{a, b} {
		settled(t, inst, sku)
		p, err := inst.Product(ctx, sku)
		require.NoError(t, err)
		assert.EqualValues(t, 2, p.Stock, "%s: one unit sold, once", sku)
	}
	got, err := inst.Checkout(ctx, co.CheckoutID)
	require.NoError(t, err)
	assert.Equal(t, co.Status, got.Status, "the redelivered checkout stays placed")
	backendtest.RequireWholeCheckouts(t, backendtest.Store(t), backendtest.SQL(t), []string{a, b}, map[string]int{"u-1": 2}, []stock.Checkout{co})
}
