package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// flagged is one service instance with local sold-out flags rechecked every ttl, on the Redis
// at redisAddr, with the pessimistic strategy (the flag sits in front of any strategy).
func flagged(t *testing.T, redisAddr string, ttl time.Duration) backendtest.Instance {
	t.Helper()
	cfg := service.Defaults()
	cfg.Strategy = "pessimistic"
	cfg.SoldOutFlag = ttl
	return backendtest.NewInstance(t, cfg, backendtest.Wiring{RedisAddrs: []string{redisAddr}})
}

func flagHits(t *testing.T, f backendtest.Instance) float64 {
	t.Helper()
	return backendtest.Counter(t, "seckill_sold_out_flag_rejections_total", nil, f)
}

// waitFlagged orders as fresh buyers on f under strategy, each answered sold_out, until one is
// answered from the flag.
func waitFlagged(t *testing.T, f backendtest.Instance, sku, strategy string) {
	t.Helper()
	before := flagHits(t, f)
	for deadline := time.Now().Add(5 * time.Second); flagHits(t, f) == before; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the instance never flagged %s", sku)
		probe := flagReq(sku, fmt.Sprintf("probe-%d", rand.Int64()))
		probe.Strategy = strategy
		_, _, err := f.PlaceOrder(context.Background(), probe)
		require.ErrorIs(t, err, stock.ErrSoldOut)
	}
}

func flagReq(sku, user string) stock.OrderRequest {
	return stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "pessimistic", IdempotencyKey: sku + "/" + user}
}

// TestSoldOutFlag: once an instance has seen a product at zero it answers sold_out from memory —
// with its database gone, even — while a buyer who holds an order still gets the original 201
// back for the same Idempotency-Key; and a PUT on another instance lifts the flag at once (not
// after the one-minute TTL), through Redis pub/sub.
func TestSoldOutFlag(t *testing.T) {
	ctx := context.Background()
	a := flagged(t, backendtest.RedisAddr(t), time.Minute)
	b := flagged(t, backendtest.RedisAddr(t), time.Minute)
	sku := backendtest.SKU(t)
	_, err := a.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 2, MaxPerOrder: 1})
	require.NoError(t, err)
	first, _, err := a.PlaceOrder(ctx, flagReq(sku, "u1"))
	require.NoError(t, err)
	_, _, err = a.PlaceOrder(ctx, flagReq(sku, "u2"))
	require.NoError(t, err)

	waitFlagged(t, b, sku, "pessimistic")
	replay, replayed, err := b.PlaceOrder(ctx, flagReq(sku, "u1"))
	require.NoError(t, err, "a buyer who holds an order takes the full path")
	assert.True(t, replayed)
	assert.Equal(t, first.OrderID, replay.OrderID)
	hits := flagHits(t, b)
	repeat := flagReq(sku, "u2")
	repeat.IdempotencyKey = ""
	_, _, err = b.PlaceOrder(ctx, repeat)
	assert.Error(t, err)
	assert.Equal(t, hits, flagHits(t, b), "a buyer who holds an order is not answered from the flag")

	_, err = a.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	var third stock.Order
	require.Eventually(t, func() bool {
		third, _, err = b.PlaceOrder(ctx, flagReq(sku, "u3"))
		return err == nil
	}, 2*time.Second, 5*time.Millisecond, "the reset did not reach the other instance's flag: %v", err)

	waitFlagged(t, b, sku, "pessimistic")
	require.NoError(t, b.Store.Close())
	hits = flagHits(t, b)
	_, _, err = b.PlaceOrder(ctx, flagReq(sku, "u4"))
	assert.ErrorIs(t, err, stock.ErrSoldOut, "answered without the database")
	assert.Equal(t, hits+1, flagHits(t, b))
	backendtest.RequireInvariant(t, a.Store, sku, []stock.Order{third})
}

// TestSoldOutFlagOffWithoutResets: while an instance cannot hear product resets (its Redis is
// gone) it drops its flags and uses none, since a reset could pass unheard; the database answers.
func TestSoldOutFlagOffWithoutResets(t *testing.T) {
	ctx := context.Background()
	redisProc := backendtest.StartRedis(t)
	f := flagged(t, redisProc.Addr, 200*time.Millisecond)
	sku := backendtest.SKU(t)
	_, err := f.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	order, _, err := f.PlaceOrder(ctx, flagReq(sku, "u1"))
	require.NoError(t, err)
	waitFlagged(t, f, sku, "pessimistic")

	redisProc.Kill()
	require.Eventually(t, func() bool {
		return backendtest.Gauge(t, f, "seckill_sold_out_flag_subscribed") == 0
	}, 5*time.Second, 20*time.Millisecond)
	hits := flagHits(t, f)
	_, _, err = f.PlaceOrder(ctx, flagReq(sku, "u2"))
	assert.ErrorIs(t, err, stock.ErrSoldOut)
	assert.Equal(t, hits, flagHits(t, f), "no flag is used while resets cannot be heard")

	redisProc.Start()
	waitFlagged(t, f, sku, "pessimistic")
	backendtest.RequireInvariant(t, f.Store, sku, []stock.Order{order})
}
