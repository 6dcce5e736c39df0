package lockstrategy_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/stock"
)

// flagged is one service instance with local sold-out flags: its own store, Redis client and
// metrics, the pessimistic strategy (the flag sits in the Registry, in front of any strategy).
type flagged struct {
	*lockstrategy.Registry
	store *stock.Store
	reg   *prometheus.Registry
}

func newFlagged(t *testing.T, rdb *redis.Client, ttl time.Duration) flagged {
	t.Helper()
	store := backendtest.Store(t)
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	r := lockstrategy.NewRegistry(store, lockstrategy.RegistryConfig{
		Default: "pessimistic", SoldOut: lockstrategy.NewSoldOut(rdb, store, ttl, log, reg),
	}, log, reg)
	r.Register(lockstrategy.NewPessimistic(store, lockstrategy.PessimisticOptions{}, lockMetrics()), false)
	require.NoError(t, r.Validate())
	t.Cleanup(func() { _ = r.Close() })
	return flagged{Registry: r, store: store, reg: reg}
}

func (f flagged) hits(t *testing.T) float64 {
	t.Helper()
	return counter(t, f.reg, "seckill_sold_out_flag_rejections_total", nil)
}

// waitFlagged orders as fresh buyers on f, each answered sold_out, until one is answered from
// the flag.
func (f flagged) waitFlagged(t *testing.T, sku string) {
	t.Helper()
	before := f.hits(t)
	for deadline := time.Now().Add(5 * time.Second); f.hits(t) == before; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the instance never flagged %s", sku)
		_, _, err := f.PlaceOrder(context.Background(), flagReq(sku, fmt.Sprintf("probe-%d", rand.Int64())))
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
	a := newFlagged(t, backendtest.Redis(t), time.Minute)
	b := newFlagged(t, backendtest.Redis(t), time.Minute)
	sku := backendtest.SKU(t)
	_, err := a.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 2, MaxPerOrder: 1})
	require.NoError(t, err)
	first, _, err := a.PlaceOrder(ctx, flagReq(sku, "u1"))
	require.NoError(t, err)
	_, _, err = a.PlaceOrder(ctx, flagReq(sku, "u2"))
	require.NoError(t, err)

	b.waitFlagged(t, sku)
	replay, replayed, err := b.PlaceOrder(ctx, flagReq(sku, "u1"))
	require.NoError(t, err, "a buyer who holds an order takes the full path")
	assert.True(t, replayed)
	assert.Equal(t, first.OrderID, replay.OrderID)
	hits := b.hits(t)
	repeat := flagReq(sku, "u2")
	repeat.IdempotencyKey = ""
	_, _, err = b.PlaceOrder(ctx, repeat)
	assert.Error(t, err)
	assert.Equal(t, hits, b.hits(t), "a buyer who holds an order is not answered from the flag")

	_, err = a.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	var third stock.Order
	require.Eventually(t, func() bool {
		third, _, err = b.PlaceOrder(ctx, flagReq(sku, "u3"))
		return err == nil
	}, 2*time.Second, 5*time.Millisecond, "the reset did not reach the other instance's flag: %v", err)

	b.waitFlagged(t, sku)
	require.NoError(t, b.store.Close())
	hits = b.hits(t)
	_, _, err = b.PlaceOrder(ctx, flagReq(sku, "u4"))
	assert.ErrorIs(t, err, stock.ErrSoldOut, "answered without the database")
	assert.Equal(t, hits+1, b.hits(t))
	backendtest.RequireInvariant(t, a.store, sku, []stock.Order{third})
}

// TestSoldOutFlagOffWithoutResets: while an instance cannot hear product resets (its Redis is
// gone) it drops its flags and uses none, since a reset could pass unheard; the database answers.
func TestSoldOutFlagOffWithoutResets(t *testing.T) {
	ctx := context.Background()
	redisProc := backendtest.StartRedis(t)
	rdb := lockstrategy.NewRedisClient(redisProc.Addr)
	t.Cleanup(func() { _ = rdb.Close() })
	f := newFlagged(t, rdb, 200*time.Millisecond)
	sku := backendtest.SKU(t)
	_, err := f.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 1, MaxPerOrder: 1})
	require.NoError(t, err)
	order, _, err := f.PlaceOrder(ctx, flagReq(sku, "u1"))
	require.NoError(t, err)
	f.waitFlagged(t, sku)

	redisProc.Kill()
	require.Eventually(t, func() bool {
		return gauge(t, f.reg, "seckill_sold_out_flag_subscribed") == 0
	}, 5*time.Second, 20*time.Millisecond)
	hits := f.hits(t)
	_, _, err = f.PlaceOrder(ctx, flagReq(sku, "u2"))
	assert.ErrorIs(t, err, stock.ErrSoldOut)
	assert.Equal(t, hits, f.hits(t), "no flag is used while resets cannot be heard")

	redisProc.Start()
	f.waitFlagged(t, sku)
	backendtest.RequireInvariant(t, f.store, sku, []stock.Order{order})
}

// gauge reads a gauge without labels.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	m := samples(t, reg, name, nil)
	require.Len(t, m, 1, "gauge %s", name)
	return m[0].GetGauge().GetValue()
}
