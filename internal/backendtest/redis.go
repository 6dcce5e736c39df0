package backendtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/redisserver"
)

var (
	redisOnce sync.Once
	redisAddr string
	redisErr  error
)

// connectRedis finds the shared test Redis (SECKILL_TEST_REDIS_ADDR or 127.0.0.1:6379), or, when
// it does not answer and backends are not required, starts an in-process miniredis.
func connectRedis() {
	addr := os.Getenv("SECKILL_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redisclient.NewSingle(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if Required() {
			redisErr = fmt.Errorf("redis at %s is required (SECKILL_TEST_REQUIRE_BACKENDS=1) but unreachable: %w", addr, err)
			return
		}
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // lock TTLs must run out with the wall clock, as in Redis
		if redisErr = m.StartAddr("127.0.0.1:0"); redisErr == nil {
			redisAddr = m.Addr()
		}
		return
	}
	redisAddr = addr
}

// RedisAddr returns the address of the shared test Redis. Tests share it and stay apart by
// their SKUs: every key is seckill:{sku}:..., and SKU's cleanup deletes the test's keys.
func RedisAddr(t testing.TB) string {
	t.Helper()
	redisOnce.Do(connectRedis)
	require.NoError(t, redisErr, "test redis")
	return redisAddr
}

// Redis returns a new client (its own pool, as a separate instance would have) on the shared
// test Redis, closed in t.Cleanup.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redisclient.NewSingle(RedisAddr(t))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// OpenConns opens n of c's connections and leaves them idle in its pool, before a test's burst:
// a burst that dials on a loaded machine may see a dial starved past its timeout (500 ms), a
// fault of the machine that the burst is not about. A dial that fails is tried again, for up to
// ten seconds.
func OpenConns(t testing.TB, c *redis.Client, n int) {
	t.Helper()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = c.Conn()
		require.Eventually(t, func() bool { return conns[i].Ping(context.Background()).Err() == nil },
			10*time.Second, 10*time.Millisecond, "a connection to Redis")
	}
	for _, cn := range conns {
		_ = cn.Close() // back to the pool
	}
}

// deleteRedisKeys removes sku's keys from the shared test Redis, if one was used.
func deleteRedisKeys(sku string) {
	if redisAddr == "" {
		return
	}
	c := redisclient.NewSingle(redisAddr)
	defer c.Close()
	prefix := "seckill:{" + sku + "}:"
	_ = c.Del(context.Background(), prefix+"stock", prefix+"buyers", prefix+"lock", prefix+"reservations", prefix+"reserved").Err()
}

// RedisProcess is a redis-server of the test's own (redisserver), for faults that must not touch
// the shared one: kill it, restart it, flush it.
type RedisProcess struct {
	Addr string
	t    testing.TB
	srv  *redisserver.Server
}

// StartRedis starts a throwaway redis-server on a free loopback port, stopped in t.Cleanup. Without
// a redis-server binary the test fails when backends are required, and is skipped (saying why)
// otherwise.
func StartRedis(t testing.TB) *RedisProcess {
	t.Helper()
	needRedisServer(t, "a Redis process")
	servers, err := redisserver.Start(t.TempDir(), 1)
	require.NoError(t, err)
	p := &RedisProcess{Addr: servers[0].Addr(), t: t, srv: servers[0]}
	t.Cleanup(p.Kill)
	return p
}

// Start starts (or restarts) the server on its port, empty, and waits until it answers.
func (p *RedisProcess) Start() {
	p.t.Helper()
	require.NoError(p.t, p.srv.Start())
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (p *RedisProcess) Kill() { p.srv.Kill() }

// needRedisServer fails the test when backends are required and redis-server is missing, and
// skips it (saying why) otherwise.
func needRedisServer(t testing.TB, what string) {
	t.Helper()
	if err := redisserver.Available(); err != nil {
		if Required() {
			t.Fatalf("redis-server is required (SECKILL_TEST_REQUIRE_BACKENDS=1) but not installed: %v", err)
		}
		t.Skipf("redis-server not installed: this test needs %s of its own: %v", what, err)
	}
}

// StartRedisCluster starts a six-node Redis Cluster — three masters, a replica each — whose
// replicas take over a master silent for a second; killed in t.Cleanup.
func StartRedisCluster(t testing.TB) *redisserver.Cluster {
	t.Helper()
	needRedisServer(t, "a Redis Cluster")
	c, err := redisserver.StartCluster(t.TempDir(), 3, 1, time.Second)
	require.NoError(t, err)
	t.Cleanup(c.Kill)
	return c
}

// StartRedisSentinel starts a master, a replica and three Sentinels that promote the replica
// once the master has been silent for a second, and waits until the Sentinels know the
// replica; killed in t.Cleanup.
func StartRedisSentinel(t testing.TB) *redisserver.SentinelSet {
	t.Helper()
	needRedisServer(t, "a Sentinel-managed Redis")
	s, err := redisserver.StartSentinelSet(t.TempDir(), "seckill", time.Second)
	require.NoError(t, err)
	t.Cleanup(s.Kill)
	require.NoError(t, s.WaitReplicated(context.Background(), 20*time.Second))
	return s
}
