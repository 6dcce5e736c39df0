package admission_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

// TestAdmitCheckout: a checkout is admitted whole or not at all, both ways admission takes it —
// one script on one Redis, line by line on a Redis Cluster. Admitted, each line holds a
// reservation; a line short of stock refuses the checkout naming its product and leaves the
// other product as it was (its counter, its buyers: the buyer may buy it alone); a buyer who
// holds a line's product is refused for that line.
func TestAdmitCheckout(t *testing.T) {
	ctx := context.Background()
	store := backendtest.Store(t)
	modes := map[string]func(t *testing.T) redis.UniversalClient{
		"one script": func(t *testing.T) redis.UniversalClient { return backendtest.Redis(t) },
		"line by line (Redis Cluster)": func(t *testing.T) redis.UniversalClient {
			c := backendtest.StartRedisCluster(t)
			clients, err := redisclient.New(redisclient.Cluster, c.Addrs(), "")
			require.NoError(t, err)
			t.Cleanup(func() { _ = clients[0].Close() })
			return clients[0]
		},
	}
	for name, client := range modes {
		t.Run(name, func(t *testing.T) {
			r := client(t)
			base := backendtest.SKU(t)
			a, b := base+"-a", base+"-b"
			for sku, units := range map[string]int64{a: 1, b: 5, base + "-c": 5} {
				_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: units, MaxPerOrder: 1})
				require.NoError(t, err)
			}
			l := admission.New(r, store, "checkouts", time.Minute, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
				admission.Options{WaitHeld: time.Millisecond})
			l.Beat(ctx)
			lines := func(user string) []stock.OrderRequest {
				return []stock.OrderRequest{{SKU: a, UserID: user, Quantity: 1}, {SKU: b, UserID: user, Quantity: 1}}
			}
			state := func(sku string) admission.State {
				live, err := l.Live(ctx)
				require.NoError(t, err)
				st, err := l.State(ctx, sku, live)
				require.NoError(t, err)
				require.NotNil(t, st.Stock)
				return st
			}

			first := lines("u1")
			res, err := l.Admit(ctx, first, 0)
			require.NoError(t, err)
			require.Len(t, res, 2)
			assert.EqualValues(t, 0, *state(a).Stock)
			assert.EqualValues(t, 4, *state(b).Stock)
			for i := range first {
				first[i].Reservation = res[i]
			}
			l.Settle(ctx, first) // written: the units stay sold
			for _, line := range first {
				l.Done(line.Reservation)
			}

			_, err = l.Admit(ctx, lines("u2"), 0)
			var refused *stock.CheckoutError
			require.ErrorAs(t, err, &refused)
			require.ErrorIs(t, err, stock.ErrSoldOut)
			assert.Equal(t, []string{a}, refused.SKUs)
			after := state(b)
			assert.EqualValues(t, 4, *after.Stock, "the refused checkout holds nothing of the other product")
			assert.Zero(t, after.Reservations)
			_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: b, UserID: "u2", Quantity: 1}}, 0)
			require.NoError(t, err, "nor its buyer: u2 may buy it alone")

			_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: b, UserID: "u1", Quantity: 1}, {SKU: base + "-c", UserID: "u1", Quantity: 1}}, 0)
			require.ErrorAs(t, err, &refused)
			require.ErrorIs(t, err, stock.ErrAlreadyPurchased)
			assert.Equal(t, []string{b}, refused.SKUs)

			_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: b, UserID: "u3", Quantity: 1}, {SKU: base + "-unknown", UserID: "u3", Quantity: 1}}, 0)
			require.ErrorAs(t, err, &refused)
			require.ErrorIs(t, err, stock.ErrNotFound)
			assert.Equal(t, []string{base + "-unknown"}, refused.SKUs)
			assert.EqualValues(t, 3, *state(b).Stock, "u2's unit alone: the unknown product's checkout took nothing")
		})
	}
}

// TestCheckoutSoldOutBeforeBusy: a checkout one of whose lines is sold out is refused sold out
// even when another line — first in SKU order — finds its last unit held by an order in its
// section. Busy would send the buyer back for an answer already known: whatever becomes of
// the held unit, the sold-out line refuses the checkout.
func TestCheckoutSoldOutBeforeBusy(t *testing.T) {
	ctx := context.Background()
	store := backendtest.Store(t)
	base := backendtest.SKU(t)
	a, b := base+"-a", base+"-b"
	for _, sku := range []string{a, b} {
		_, err := store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	l := admission.New(backendtest.Redis(t), store, "checkouts", time.Minute, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		admission.Options{WaitHeld: time.Second})
	l.Beat(ctx)
	_, err := l.Admit(ctx, []stock.OrderRequest{{SKU: a, UserID: "in-section", Quantity: 1}}, 0) // held, not yet written
	require.NoError(t, err)
	sold := stock.OrderRequest{SKU: b, UserID: "sold", Quantity: 1}
	res, err := l.Admit(ctx, []stock.OrderRequest{sold}, 0)
	require.NoError(t, err)
	sold.Reservation = res[0]
	l.Settle(ctx, []stock.OrderRequest{sold})
	l.Done(sold.Reservation)

	_, err = l.Admit(ctx, []stock.OrderRequest{{SKU: a, UserID: "u", Quantity: 1}, {SKU: b, UserID: "u", Quantity: 1}}, 0)
	var refused *stock.CheckoutError
	require.ErrorAs(t, err, &refused)
	require.ErrorIs(t, err, stock.ErrSoldOut, "not busy: the sold-out line refuses the checkout whatever the held unit becomes")
	assert.Equal(t, []string{b}, refused.SKUs)
}
