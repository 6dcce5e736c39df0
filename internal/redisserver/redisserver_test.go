package redisserver_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/redisserver"
)

// TestServersAreIndependent: two servers on their own ports; a write held by one's pause does
// not hold up the other, and killing one leaves the other answering.
func TestServersAreIndependent(t *testing.T) {
	if err := redisserver.Available(); err != nil {
		if backendtest.Required() {
			t.Fatalf("redis-server is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skip(err)
	}
	servers, err := redisserver.Start(t.TempDir(), 2)
	require.NoError(t, err)
	t.Cleanup(func() { redisserver.Kill(servers...) })
	require.NotEqual(t, servers[0].Addr(), servers[1].Addr())
	ctx := context.Background()
	a, b := servers[0].Client(), servers[1].Client()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })

	pause := 300 * time.Millisecond
	require.NoError(t, servers[0].Pause(ctx, pause))
	start := time.Now()
	require.NoError(t, b.Set(ctx, "k", "v", 0).Err())
	assert.Less(t, time.Since(start), pause/2, "the other server's write waited for the pause")
	require.NoError(t, a.Ping(ctx).Err(), "a paused server still answers reads")
	require.NoError(t, a.Set(ctx, "k", "v", 0).Err())
	assert.GreaterOrEqual(t, time.Since(start), pause*9/10, "the paused server's write did not wait")

	servers[0].Kill()
	_, err = net.DialTimeout("tcp", servers[0].Addr(), time.Second)
	assert.Error(t, err, "a killed server accepted a connection")
	assert.NoError(t, b.Ping(ctx).Err())
	got, err := b.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}
