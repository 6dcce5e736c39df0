package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// TestCutOffFromItsDatabase: an instance alive and reaching Redis, but cut off from its database
// — as when its node of a Galera cluster dies — while an order of its holds a unit: the order
// fails with its outcome unknown (unavailable), so its reservation stays. The instance stops
// beating, so the other instance's sweeper returns that unit within 3 s of the cut, and the other
// sells every unit; meanwhile the cut-off instance answers unavailable at once and reserves
// nothing. Once its database is back it sells again, and the ledger is exact: the unit came back
// once.
func TestCutOffFromItsDatabase(t *testing.T) {
	backendtest.NeedMySQL(t, "a fault proxy in front of the database")
	ctx := context.Background()
	dbp := backendtest.StartFaultProxy(t, backendtest.MySQLAddr(t))
	cfg := service.Defaults()
	var once sync.Once
	var cutAt time.Time
	cfg.Hooks.InSection = func(_ context.Context, orders []stock.OrderRequest) {
		if orders[0].UserID == "victim" {
			once.Do(func() { dbp.Stop(); cutAt = time.Now() })
		}
	}
	cut := backendtest.NewInstance(t, cfg, backendtest.Wiring{Store: backendtest.StoreVia(t, "tcp", dbp.Listen)})
	other := backendtest.NewInstance(t, service.Defaults(), backendtest.Wiring{})
	sku := backendtest.SKU(t)
	_, err := other.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 3, MaxPerOrder: 1})
	require.NoError(t, err)
	var acked []stock.Order
	buy := func(inst backendtest.Instance, user string) error {
		o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "hybrid"})
		if err == nil {
			acked = append(acked, o)
		}
		return err
	}
	require.NoError(t, buy(other, "first"), "the other instance admits an order for the product, so it sweeps it")
	require.ErrorIs(t, buy(cut, "victim"), stock.ErrUnavailable, "the database went mid-section")
	reservations := func() int64 {
		a, err := other.Audit(ctx, sku)
		require.NoError(t, err)
		require.NotNil(t, a.Redis)
		return a.Redis.Reservations
	}
	require.EqualValues(t, 1, reservations(), "the failed order's outcome is unknown: its unit stays reserved")

	require.Eventually(t, func() bool { return reservations() == 0 }, 5*time.Second, 10*time.Millisecond,
		"the cut-off instance's reservation never came back")
	back := time.Since(cutAt)
	t.Logf("the cut-off instance's reservation was back on sale %s after its database went", back.Round(10*time.Millisecond))
	assert.Less(t, back, 3*time.Second, "the stated bound (No frozen sale)")
	require.ErrorIs(t, buy(cut, "meanwhile"), stock.ErrUnavailable)
	assert.Zero(t, reservations(), "an instance whose database refuses reserves nothing")
	require.NoError(t, buy(other, "second"))
	require.NoError(t, buy(other, "third"), "the returned unit sells")
	require.ErrorIs(t, buy(other, "fourth"), stock.ErrSoldOut)

	a, err := other.Audit(ctx, sku)
	require.NoError(t, err)
	assert.Zero(t, a.Redis.Reservations)
	assert.Zero(t, a.HeldBack(), "admission's counter is the database's stock: the unit came back once")
	backendtest.RequireInvariant(t, other.Store, sku, acked)

	require.NoError(t, dbp.Start())
	again := backendtest.SKU(t)
	require.Eventually(t, func() bool {
		if _, err := cut.PutProduct(ctx, stock.ProductSpec{SKU: again, Name: t.Name(), Stock: 1, MaxPerOrder: 1}); err != nil {
			return false
		}
		_, _, err := cut.PlaceOrder(ctx, stock.OrderRequest{SKU: again, UserID: "again", Quantity: 1, Strategy: "hybrid"})
		return err == nil
	}, 5*time.Second, 50*time.Millisecond, "the instance did not sell again once its database was back")
}
