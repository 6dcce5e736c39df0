package lockstrategy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// ended waits until every accepted order of a queued sale has ended — placed or rejected, its
// record final — within limit, and returns the placed ones as the database has them: the orders
// "every 202 ends" promises. An order still queued by then fails the test.
func ended(t *testing.T, insts []backendtest.Instance, accepted []stock.Order, limit time.Duration) (placed []stock.Order, rejected map[string]string) {
	t.Helper()
	rejected = map[string]string{}
	deadline := time.Now().Add(limit)
	for i, o := range accepted {
		got, err := insts[i%len(insts)].WaitOrder(context.Background(), o.OrderID, max(time.Millisecond, time.Until(deadline)))
		require.NoError(t, err, "order %s", o.OrderID)
		switch got.Status {
		case stock.Queued:
			t.Fatalf("order %s still queued %s after the sale", o.OrderID, limit)
		case stock.Rejected:
			rejected[o.OrderID] = got.Reason
		default:
			assert.True(t, got.Status.Active(), "order %s: %s", o.OrderID, got.Status)
			placed = append(placed, got)
		}
	}
	return placed, rejected
}

// TestQueuedSale is the shared suite's sale under the queued strategy: 200 buyers on 3 instances
// against 50 units hear 202 exactly 50 times (admission answers the rest sold_out, never
// queued), every 202 ends placed — by writers on any instance — and the invariant holds.
func TestQueuedSale(t *testing.T) {
	for _, v := range bothWays("queued") {
		t.Run(v.name, func(t *testing.T) {
			sku := backendtest.SKU(t)
			insts := newInstances(t, instances, v.cfg, backendtest.Wiring{})
			res := sellOn(t, insts, sku, units, buyers, fault{})
			t.Logf("%s on %s: outcomes %v after %d busy retries", v.name, backendtest.Dialect(t), res.outcome, res.retries)
			assert.Equal(t, map[string]int{"ok": units, "sold_out": buyers - units}, res.outcome)
			for _, o := range res.acked {
				assert.Equal(t, stock.Queued, o.Status, "a queued order is answered queued")
			}
			placed, rejected := ended(t, insts, res.acked, 10*time.Second)
			assert.Empty(t, rejected)
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
			assert.Zero(t, a.Stock)
			assertLinearizable(t, units, res)
			audit, err := insts[0].Audit(context.Background(), sku)
			require.NoError(t, err)
			require.NotNil(t, audit.Queued)
			assert.Zero(t, *audit.Queued, "nothing left in the queue")
			writers := 0
			for _, inst := range insts {
				if backendtest.Counter(t, "seckill_queue_orders_total", map[string]string{"event": "placed"}, inst) > 0 {
					writers++
				}
			}
			t.Logf("orders placed by the writers of %d of %d instances", writers, len(insts))
		})
	}
}

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
	placed, rejected := ended(t, insts, accepted, 10*time.Second)
	assert.Len(t, placed, 2)
	assert.Equal(t, map[string]string{accepted[2].OrderID: "sold_out", accepted[3].OrderID: "sold_out"}, rejected,
		"the last two, in the queue's order")
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	audit, err := insts[0].Audit(ctx, sku)
	require.NoError(t, err)
	require.NotNil(t, audit.Redis)
	require.NotNil(t, audit.Redis.Stock)
	assert.Zero(t, *audit.Redis.Stock, "admission capped at what the database said")
	assert.Zero(t, audit.Redis.Reservations, "every reservation ended: settled or given back")
}
