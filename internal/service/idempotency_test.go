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

// TestInFlightRepeat: while an order is inside its critical section on one instance, the same
// request (same Idempotency-Key, same body) on another instance is neither told
// already_purchased nor placed twice: it waits for the original and answers it. Past the wait
// budget it hears busy, and its retry, once the original has settled, answers it too. The same
// user with another key is already_purchased at once.
func TestInFlightRepeat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hold  time.Duration
		first error // what the repeat hears while the original is in flight
	}{
		{"original settles within the wait", 500 * time.Millisecond, nil},
		{"original outlasts the wait", 3 * time.Second, stock.ErrBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := service.Defaults()
			hooks, inside := backendtest.HoldSection("u1", tc.hold)
			other := backendtest.NewInstance(t, cfg, backendtest.Wiring{})
			cfg.Hooks = hooks
			holder := backendtest.NewInstance(t, cfg, backendtest.Wiring{})
			sku := backendtest.SKU(t)
			_, err := holder.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 5, MaxPerOrder: 1})
			require.NoError(t, err)
			req := stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 1, Strategy: "hybrid", IdempotencyKey: sku + "/u1"}

			original := make(chan stock.Order, 1)
			go func() {
				o, _, err := holder.PlaceOrder(ctx, req)
				assert.NoError(t, err)
				original <- o
			}()
			<-inside

			otherKey := req
			otherKey.IdempotencyKey = sku + "/u1-again"
			_, _, err = other.PlaceOrder(ctx, otherKey)
			assert.ErrorIs(t, err, stock.ErrAlreadyPurchased, "another key of the same buyer is a second purchase")

			start := time.Now()
			repeat, replayed, err := other.PlaceOrder(ctx, req)
			waited := time.Since(start)
			if tc.first != nil {
				assert.ErrorIs(t, err, tc.first)
				assert.Equal(t, "busy", stock.Code(err), "answered 429 busy")
				assert.InDelta(t, cfg.LockWait.Seconds(), waited.Seconds(), 0.5, "after the wait budget")
				o := <-original
				repeat, replayed, err = other.PlaceOrder(ctx, req)
				require.NoError(t, err)
				assert.True(t, replayed)
				assert.Equal(t, o.OrderID, repeat.OrderID)
				backendtest.RequireInvariant(t, holder.Store, sku, []stock.Order{o})
				return
			}
			require.NoError(t, err, "waited for the original")
			assert.True(t, replayed)
			o := <-original
			assert.Equal(t, o.OrderID, repeat.OrderID, "the repeat answers the original order")
			backendtest.RequireInvariant(t, holder.Store, sku, []stock.Order{o})
		})
	}
}
