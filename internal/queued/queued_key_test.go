package queued_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// TestQueuedKeyInFlight: two buyers send one Idempotency-Key while neither order is written, so
// both are accepted (the key is checked against written orders only). The writers then place
// one and reject the other with reason idempotency_conflict, its unit back: both 202s end, one
// row carries the key. Without that refusal the second order comes back to the writers for ever
// and stays queued.
func TestQueuedKeyInFlight(t *testing.T) {
	cfg := config("queued")
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
	t.Cleanup(free)
	ctx := context.Background()
	sku := backendtest.SKU(t)
	_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 5, MaxPerOrder: 1})
	require.NoError(t, err)
	var accepted []stock.Order
	for i, user := range []string{"u-1", "u-2"} {
		o, _, err := insts[i].PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued", IdempotencyKey: "key-" + sku})
		require.NoError(t, err, user)
		require.Equal(t, stock.Queued, o.Status)
		accepted = append(accepted, o)
	}
	free()
	placed, rejected := backendtest.Ended(t, insts, accepted, 10*time.Second)
	require.Len(t, placed, 1, "one order carries the key")
	assert.Equal(t, map[string]string{otherThan(accepted, placed[0]).OrderID: "idempotency_conflict"}, rejected)
	settled(t, insts[0], sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.EqualValues(t, 4, a.Stock, "the rejected order's unit is back")
}

// otherThan is the order of two that is not o.
func otherThan(two []stock.Order, o stock.Order) stock.Order {
	if two[0].OrderID == o.OrderID {
		return two[1]
	}
	return two[0]
}
