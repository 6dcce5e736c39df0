package admission_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// TestSettleAfterSweep is a frozen instance's order written after the sweeper returned its
// reservation: the instance admits a buyer and stops beating, the live instance's sweeper finds
// no order and puts the unit and the buyer back; then the frozen one wakes, writes the order
// (the database still had the unit) and settles it. The settle must take the unit and the buyer
// again, once, so that admission's counter is the database's stock and the buyer a repeat. A
// settle that skips that leaves the counter offering a unit the database has sold.
func TestSettleAfterSweep(t *testing.T) {
	ctx := context.Background()
	store, r := backendtest.Store(t), backendtest.Redis(t)
	sku := backendtest.SKU(t)
	_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 3, MaxPerOrder: 1})
	require.NoError(t, err)
	ledger := func(name string, ttl time.Duration) *admission.Ledger {
		l := admission.New(r, store, name, ttl, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), admission.Options{})
		l.Beat(ctx)
		return l
	}
	frozen := ledger("frozen", 300*time.Millisecond)
	live := ledger("live", time.Minute)

	req := stock.OrderRequest{SKU: sku, UserID: "u", Quantity: 1, Strategy: "hybrid"}
	res, err := frozen.Admit(ctx, []stock.OrderRequest{req}, 0)
	require.NoError(t, err)
	req.Reservation = res[0]
	var alive []string
	require.Eventually(t, func() bool {
		alive, err = live.Live(ctx)
		require.NoError(t, err)
		n, err := live.Sweep(ctx, sku, alive)
		require.NoError(t, err)
		return n == 1
	}, 10*time.Second, 50*time.Millisecond, "the frozen instance's reservation was never swept")
	st, err := live.State(ctx, sku, alive)
	require.NoError(t, err)
	require.NotNil(t, st.Stock)
	require.EqualValues(t, 3, *st.Stock, "the swept unit is back on sale")

	p, err := store.Product(ctx, sku)
	require.NoError(t, err)
	placed, err := store.PlaceAt(ctx, []stock.CheckoutRequest{stock.OrderOf(req)}, []stock.Product{p})
	require.NoError(t, err)
	require.NoError(t, placed[0].Err, "the database still had the unit")
	frozen.Settle(ctx, []stock.OrderRequest{req})
	frozen.Settle(ctx, []stock.OrderRequest{req}) // a settle repeated takes nothing more

	st, err = live.State(ctx, sku, alive)
	require.NoError(t, err)
	require.NotNil(t, st.Stock)
	assert.EqualValues(t, 2, *st.Stock, "the settle took the swept unit again: the counter is the database's stock")
	assert.Zero(t, st.Reservations)
	_, err = live.Admit(ctx, []stock.OrderRequest{req}, 0)
	assert.ErrorIs(t, err, stock.ErrAlreadyPurchased, "the settle took the buyer again")
	backendtest.RequireInvariant(t, store, sku, []stock.Order{placed[0].Checkout.Lines[0]})
}
