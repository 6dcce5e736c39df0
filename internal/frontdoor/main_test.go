package frontdoor_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/redisclient"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// keyPrefix is a Redis key prefix of this test's own: the tests share one Redis and stay apart
// by it. Its keys (and the buyer buckets redis_rate names "rate:<prefix>...") are deleted at
// cleanup.
func keyPrefix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "seckill-test:" + hex.EncodeToString(b) + ":"
	addr := backendtest.RedisAddr(t)
	t.Cleanup(func() {
		c := redisclient.NewSingle(addr)
		defer c.Close()
		ctx := context.Background()
		for _, match := range []string{prefix + "*", "rate:" + prefix + "*"} {
			iter := c.Scan(ctx, 0, match, 1000).Iterator()
			for iter.Next(ctx) {
				_ = c.Del(ctx, iter.Val()).Err()
			}
		}
	})
	return prefix
}

// instance is one service instance's front door: its own Redis client (its own pool), room and
// passes, as a process of cmd/api would have.
type instance struct {
	client *redis.Client
	room   *frontdoor.Room
	passes *frontdoor.Passes
}

// instances returns n instances over the test Redis, sharing prefix as one deployment does.
func instances(t *testing.T, n int, prefix string) []instance {
	t.Helper()
	out := make([]instance, n)
	for i := range out {
		c := backendtest.Redis(t)
		passes := frontdoor.NewPasses(c, frontdoor.Options{Prefix: prefix})
		out[i] = instance{client: c, room: frontdoor.NewRoom(c, passes, frontdoor.Options{Prefix: prefix}), passes: passes}
	}
	return out
}

// redisNow is Redis's clock: the one the waiting room and the buckets run on.
func redisNow(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}
