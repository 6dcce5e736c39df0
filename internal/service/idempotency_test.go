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
// user with another key is already_purchased at once. The original's section is let go once the
// repeat is seen waiting for it, or once the repeat has heard busy.
func TestInFlightRepeat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outlast bool // the original is held past the repeat's wait
	}{
		{"original settles within the wait", false},
		{"original outlasts the wait", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := service.Defaults()
			hooks, inside, release := backendtest.HoldSection("u1")
			defer release()
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

			type answer struct {
				order    stock.Order
				replayed bool
				err      error
				waited   time.Duration
			}
			answered := make(chan answer, 1)
			go func() {
				start := time.Now()
				o, replayed, err := other.PlaceOrder(ctx, req)
				answered <- answer{o, replayed, err, time.Since(start)}
			}()
			if !tc.outlast {
				// Admission answers the repeat "in flight" while the original holds the key's
				// reservation: from the first such answer on, the repeat waits for it.
				require.Eventually(t, func() bool {
					return backendtest.Counter(t, "seckill_admission_total", map[string]string{"result": "in_flight"}, other) > 0
				}, 10*time.Second, 2*time.Millisecond, "the repeat never waited for the original")
				release()
			}
			a := <-answered
			repeat, replayed, err, waited := a.order, a.replayed, a.err, a.waited
			if tc.outlast {
				assert.ErrorIs(t, err, stock.ErrBusy)
				assert.Equal(t, "busy", stock.Code(err), "answered 429 busy")
				assert.GreaterOrEqual(t, waited, cfg.LockWait, "not before the wait budget")
				assert.Less(t, waited, cfg.LockWait+time.Second, "after the wait budget and one more look")
				release()
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
