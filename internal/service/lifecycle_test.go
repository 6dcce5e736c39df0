package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// TestReturnedUnitsSellAtOnce: under every strategy, a product sold out on three instances —
// Redis admission at zero, every instance answering from its sold-out flag — gets a unit back
// when one order is cancelled on one instance, and a new buyer on another instance buys it as
// soon as the reset message reaches that instance: the flags are trusted for a minute here, so
// only the message can lift them, and every answer before it is the stale flag's, never
// admission's or the database's (they had the unit before the cancel answered). The buyer whose
// order was cancelled may buy again. The same for an order that expires unpaid, by itself.
func TestReturnedUnitsSellAtOnce(t *testing.T) {
	ctx := context.Background()
	for _, strategy := range []string{"hybrid", "etcd", "zookeeper", "pessimistic", "dblock"} {
		t.Run(strategy, func(t *testing.T) {
			cfg := service.Defaults()
			cfg.Strategy = strategy
			cfg.SoldOutFlag = time.Minute
			var insts []backendtest.Instance
			for range 3 {
				insts = append(insts, backendtest.NewInstance(t, cfg, backendtest.Wiring{ZKServers: backendtest.ZooKeeperFor(t, strategy)}))
			}
			sku := backendtest.SKU(t)
			_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 2, MaxPerOrder: 1, PaymentTimeout: 2 * time.Second})
			require.NoError(t, err)
			buy := func(inst backendtest.Instance, user string) (stock.Order, error) {
				o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: strategy})
				return o, err
			}
			first, err := buy(insts[0], "first")
			require.NoError(t, err)
			unpaid, err := buy(insts[0], "unpaid")
			require.NoError(t, err)
			_, err = insts[0].PayOrder(ctx, first.OrderID, "first")
			require.NoError(t, err)
			for _, inst := range insts {
				waitFlagged(t, inst, sku, strategy)
			}

			_, err = insts[0].CancelOrder(ctx, first.OrderID, "first")
			require.NoError(t, err)
			hits := backendtest.Counter(t, "seckill_sold_out_flag_rejections_total", nil, insts[2])
			var (
				second stock.Order
				tries  int
			)
			require.Eventually(t, func() bool {
				tries++
				second, err = buy(insts[2], "second")
				return err == nil
			}, 5*time.Second, time.Millisecond, "the reset never lifted the other instance's flag")
			assert.Equal(t, float64(tries-1), backendtest.Counter(t, "seckill_sold_out_flag_rejections_total", nil, insts[2])-hits,
				"a buyer was told sold out, after the cancel, by something else than a flag the reset had not reached yet")
			t.Logf("bought on another instance after %d answers from its stale flag", tries-1)
			_, err = insts[2].PayOrder(ctx, second.OrderID, "second")
			require.NoError(t, err)
			_, err = buy(insts[1], "first")
			assert.ErrorIs(t, err, stock.ErrSoldOut, "the buyer may buy again — but the unit is gone again")

			// The unpaid order expires by itself within 5 s, and its unit sells on every instance.
			var third stock.Order
			require.Eventually(t, func() bool {
				third, err = buy(insts[1], "third")
				return err == nil
			}, 5*time.Second, 10*time.Millisecond, "the unpaid order's unit did not come back: %v", err)
			_, err = insts[1].PayOrder(ctx, third.OrderID, "third")
			require.NoError(t, err)
			o, err := insts[2].Order(ctx, unpaid.OrderID)
			require.NoError(t, err)
			assert.Equal(t, stock.Expired, o.Status)
			a := backendtest.RequireInvariant(t, insts[0].Store, sku, []stock.Order{second, third})
			assert.EqualValues(t, 1, a.Cancelled)
			assert.EqualValues(t, 1, a.Expired)
		})
	}
}
