package admission_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// stopped is a clock that moves only when the test moves it, so a bound is met to the
// nanosecond: just before it, and at it.
type stopped struct{ at atomic.Int64 }

func newStopped() *stopped {
	c := &stopped{}
	c.at.Store(time.Now().UnixNano())
	return c
}

func (c *stopped) now() time.Time          { return time.Unix(0, c.at.Load()) }
func (c *stopped) advance(d time.Duration) { c.at.Add(int64(d)) }

// ledgerOn is a ledger on the test Redis with clock c, and a product of units for it to admit.
func ledgerOn(t *testing.T, c *stopped, units int64) (*admission.Ledger, string) {
	t.Helper()
	store, sku := backendtest.Store(t), backendtest.SKU(t)
	_, err := store.PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: sku, Stock: units, MaxPerOrder: 1})
	require.NoError(t, err)
	ledger := admission.New(backendtest.Redis(t), store, t.Name(), 2*time.Second, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		admission.Options{Clock: c.now})
	ledger.Beat(context.Background())
	return ledger, sku
}

// TestBreakerCooldown: after a Redis error the breaker keeps Redis unasked for its cooldown —
// an order hears ErrRedisDown at once, and takes nothing — and the first order once the
// cooldown has passed asks Redis again and is admitted: admission resumes by itself.
func TestBreakerCooldown(t *testing.T) {
	ctx := context.Background()
	clock := newStopped()
	ledger, sku := ledgerOn(t, clock, 1)
	req := stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 1}

	ledger.Down("test", errors.New("a Redis error"))
	assert.False(t, ledger.Available())
	_, err := ledger.Admit(ctx, []stock.OrderRequest{req}, 0)
	require.ErrorIs(t, err, admission.ErrRedisDown, "in the cooldown")
	clock.advance(admission.Cooldown - time.Nanosecond)
	_, err = ledger.Admit(ctx, []stock.OrderRequest{req}, 0)
	require.ErrorIs(t, err, admission.ErrRedisDown, "a nanosecond before the cooldown's end")

	clock.advance(time.Nanosecond)
	assert.True(t, ledger.Available(), "the cooldown has passed")
	_, err = ledger.Admit(ctx, []stock.OrderRequest{req}, 0)
	require.NoError(t, err, "the first order after the cooldown asks Redis")
	_, err = ledger.Admit(ctx, []stock.OrderRequest{{SKU: sku, UserID: "u2", Quantity: 1}}, 0)
	assert.ErrorIs(t, err, stock.ErrBusy, "one unit, held by u1's reservation: the orders before took none")
}

// TestDoubtSweptAfterGrace: an order whose outcome is unknown (its commit's answer lost) leaves
// its reservation in doubt, and its own instance's sweeper leaves that alone for the grace — a
// commit sent before may still land — then asks the database, finds no order, and returns the
// unit, once.
func TestDoubtSweptAfterGrace(t *testing.T) {
	ctx := context.Background()
	clock := newStopped()
	ledger, sku := ledgerOn(t, clock, 1)
	req := stock.OrderRequest{SKU: sku, UserID: "u1", Quantity: 1}
	res, err := ledger.Admit(ctx, []stock.OrderRequest{req}, 0)
	require.NoError(t, err)
	req.Reservation = res[0]
	ledger.GiveBack(ctx, []stock.OrderRequest{req}, fmt.Errorf("commit: %w", stock.ErrUnavailable))

	sweep := func() int64 {
		t.Helper()
		live, err := ledger.Live(ctx)
		require.NoError(t, err)
		units, err := ledger.Sweep(ctx, sku, live)
		require.NoError(t, err)
		return units
	}
	assert.Zero(t, sweep(), "in doubt: left alone")
	clock.advance(admission.SweepGrace)
	assert.Zero(t, sweep(), "at the grace's end: still left alone")
	_, err = ledger.Held(ctx, sku, "u1")
	require.NoError(t, err, "the reservation holds its unit")

	clock.advance(time.Nanosecond)
	assert.EqualValues(t, 1, sweep(), "past the grace: no order, the unit returned")
	assert.Zero(t, sweep(), "returned once")
	_, err = ledger.Held(ctx, sku, "u1")
	assert.ErrorIs(t, err, stock.ErrNotFound)
	_, err = ledger.Admit(ctx, []stock.OrderRequest{{SKU: sku, UserID: "u2", Quantity: 1}}, 0)
	assert.NoError(t, err, "the returned unit sells")
}
