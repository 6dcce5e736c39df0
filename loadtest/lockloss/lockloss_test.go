package lockloss

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/contract"
)

// TestFaultTakesPublishedLock: the fault takes the lock where the service says it is (GET
// .../locks), and a strategy the service names no lock of — a key layout the tool cannot find —
// is an error before the sale, never a sale that ran with nothing taken.
func TestFaultTakesPublishedLock(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("SECKILL_TEST_REDIS_ADDR"), "127.0.0.1:6379")})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctx).Err(); err != nil {
		if os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
			t.Fatalf("Redis is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skipf("needs a real Redis: %v", err)
	}
	thief := &Thief{redis: []*redis.Client{c}}
	sku := fmt.Sprintf("lt-fault-%d", time.Now().UnixNano())
	key := "published:{" + sku + "}:lock" // not the service's layout: the thief must take it anyway
	locks := contract.Locks{SKU: sku, Locks: []contract.Lock{{Strategy: "hybrid", Backend: "redis", Key: key}}}

	require.NoError(t, c.Set(ctx, key, "a holder", time.Minute).Err())
	f, err := thief.Start(ctx, "hybrid", locks)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Exists(ctx, key).Val() == 0 }, 5*time.Second, time.Millisecond,
		"the published key was taken from its holder")
	taken, err := f.Stop()
	require.NoError(t, err)
	assert.Equal(t, 1, taken)

	_, err = thief.Start(ctx, "unguarded-redis", locks)
	assert.ErrorContains(t, err, "names no lock of unguarded-redis", "a lock the service does not name")
	_, err = thief.Start(ctx, "hybrid", contract.Locks{SKU: sku, Locks: []contract.Lock{{Strategy: "hybrid", Backend: "etcd", Key: key}}})
	assert.ErrorContains(t, err, "the fault takes locks in redis", "a lock in another backend than the fault's")
	f, err = thief.Start(ctx, "naive", locks)
	assert.NoError(t, err)
	assert.Nil(t, f, "naive has no lock to take")
}

// TestLowestNode: the ZooKeeper holder is the lowest sequence number, whatever the guids before
// it — sorting the names as a whole would take a waiter's node.
func TestLowestNode(t *testing.T) {
	holder, ok := lowestNode([]string{"_c_aaa-lock-0000000012", "_c_zzz-lock-0000000003", "_c_mmm-lock-0000000007"})
	require.True(t, ok)
	assert.Equal(t, "_c_zzz-lock-0000000003", holder)
	_, ok = lowestNode(nil)
	assert.False(t, ok)
}
