package frontdoor_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
)

// TestOnRedisCluster: every script of the door names keys of one slot — a product's room by its
// {sku}, a buyer's bucket by its {buyer:...} — so the door works on a Redis Cluster, whose
// masters each hold some of the products (a script over two slots fails there with CROSSSLOT).
func TestOnRedisCluster(t *testing.T) {
	cluster := backendtest.StartRedisCluster(t)
	client := cluster.Client()
	t.Cleanup(func() { _ = client.Close() })
	ctx := t.Context()
	passes := frontdoor.NewPasses(client, frontdoor.Options{})
	room := frontdoor.NewRoom(client, passes, frontdoor.Options{})
	limiter, err := frontdoor.NewLimiter(client, frontdoor.BuyerLimit{Rate: 100}, frontdoor.Options{})
	require.NoError(t, err)
	now, err := client.Time(ctx).Result()
	require.NoError(t, err)

	for i := range 6 { // six products: spread over the three masters
		p := fast(fmt.Sprintf("sku-%d", i))
		p.StartsAt = now.Add(time.Hour)
		early, err := room.Join(ctx, p, "u-early")
		require.NoError(t, err)
		require.Nil(t, early.Position)
		p.StartsAt = now
		late, err := room.Join(ctx, p, "u-late")
		require.NoError(t, err)
		for buyer, ticket := range map[string]string{"u-early": early.Ticket, "u-late": late.Ticket} {
			require.Eventually(t, func() bool {
				w, err := room.Poll(ctx, p, buyer, ticket)
				require.NoError(t, err)
				return w.Admitted && assert.NoError(t, passes.CheckPass(ctx, w.Pass, buyer, p.SKU))
			}, 5*time.Second, time.Millisecond)
		}
		s, err := room.Stats(ctx, p)
		require.NoError(t, err)
		assert.EqualValues(t, 2, s.Admitted)
		require.NoError(t, room.Reset(ctx, p.SKU))
		require.NoError(t, limiter.Allow(ctx, fmt.Sprintf("u-%d", i)))
	}
}
