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

// TestQueuedKeyOfAnEndedOrder: an order placed and then cancelled gave its buyer's mark in
// admission back, so a repeat of its POST — same buyer, same Idempotency-Key — is admitted
// again. The key read before the 202 (keyUnused) finds the written order: the repeat answers
// that order, cancelled, and no second order is accepted. Without the read the repeat is
// answered 202 with a new order id, which the writer's insert then rejects: a buyer told
// "accepted" twice for one key.
func TestQueuedKeyOfAnEndedOrder(t *testing.T) {
	insts := newInstances(t, 1, config("queued"), backendtest.Wiring{})
	inst, ctx := insts[0], context.Background()
	sku := backendtest.SKU(t)
	_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 5, MaxPerOrder: 1})
	require.NoError(t, err)
	req := stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: "queued", IdempotencyKey: "key-" + sku}
	first, _, err := inst.PlaceOrder(ctx, req)
	require.NoError(t, err)
	placed, err := inst.WaitOrder(ctx, first.OrderID, 10*time.Second)
	require.NoError(t, err)
	require.True(t, placed.Status.Active(), "the order was placed: %s", placed.Status)
	_, err = inst.CancelOrder(ctx, first.OrderID, "u-1")
	require.NoError(t, err)

	again, replayed, err := inst.PlaceOrder(ctx, req)
	require.NoError(t, err, "the repeat of an ended order's POST")
	assert.True(t, replayed, "the repeat is a replay of the order its key names")
	assert.Equal(t, first.OrderID, again.OrderID, "the repeat answers the first order, not a second one")
	assert.Equal(t, stock.Cancelled, again.Status)
	settled(t, inst, sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, nil)
	assert.EqualValues(t, 5, a.Stock, "every unit back on sale")
}
