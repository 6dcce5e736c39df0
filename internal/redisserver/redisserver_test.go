package redisserver_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/redisserver"
)

// TestServersAreIndependent: two servers on their own ports; a write held by one's pause does
// not hold up the other — the other's write is answered while the paused one's is seen held, and
// the held one is answered once the pause is lifted — and killing one leaves the other answering.
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

	// Paused far longer than the test needs: the pause is lifted by the test, not by its end.
	require.NoError(t, servers[0].Pause(ctx, time.Minute))
	// A client that waits for its answer as long as the pause holds it.
	patient := redis.NewClient(&redis.Options{Addr: servers[0].Addr(), ReadTimeout: -1})
	t.Cleanup(func() { _ = patient.Close() })
	held := make(chan error, 1)
	go func() { held <- patient.Set(ctx, "k", "v", 0).Err() }()
	require.Eventually(t, func() bool {
		info, err := a.Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1")
	}, 10*time.Second, 5*time.Millisecond, "the paused server never held the write")
	require.NoError(t, b.Set(ctx, "k", "v", 0).Err(), "the other server's write")
	select {
	case err := <-held:
		t.Fatalf("the paused server's write was answered before the pause was lifted: %v", err)
	default:
	}
	require.NoError(t, a.Ping(ctx).Err(), "a paused server still answers reads")
	require.NoError(t, a.Do(ctx, "CLIENT", "UNPAUSE").Err())
	select {
	case err := <-held:
		require.NoError(t, err, "the held write, once the pause was lifted")
	case <-time.After(10 * time.Second):
		t.Fatal("the held write was not answered once the pause was lifted")
	}

	servers[0].Kill()
	_, err = net.DialTimeout("tcp", servers[0].Addr(), time.Second)
	assert.Error(t, err, "a killed server accepted a connection")
	assert.NoError(t, b.Ping(ctx).Err())
	got, err := b.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}
