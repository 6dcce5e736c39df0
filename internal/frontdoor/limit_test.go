package frontdoor_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/stock"
)

func TestBuyerLimitBounds(t *testing.T) {
	c := backendtest.Redis(t)
	for _, bad := range []frontdoor.BuyerLimit{{}, {Rate: -1}, {Rate: math.Inf(1)}, {Rate: 1, Burst: -1}} {
		_, err := frontdoor.NewLimiter(c, bad, frontdoor.Options{})
		assert.ErrorIs(t, err, stock.ErrInvalid, "%+v", bad)
	}
}

// TestBuyerLimit: a buyer gets its burst, then 429 with the time until its next request would
// pass — and after that time, it passes; another buyer has a bucket of its own.
func TestBuyerLimit(t *testing.T) {
	ctx := t.Context()
	l, err := frontdoor.NewLimiter(backendtest.Redis(t), frontdoor.BuyerLimit{Rate: 2, Burst: 3}, frontdoor.Options{Prefix: keyPrefix(t)})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, l.Allow(ctx, "u-1"))
	}
	err = l.Allow(ctx, "u-1")
	var limited *frontdoor.RateLimitedError
	require.ErrorAs(t, err, &limited)
	require.ErrorIs(t, err, frontdoor.ErrRateLimited)
	assert.Equal(t, "rate_limited", stock.Code(err))
	assert.True(t, limited.RetryAfter > 0 && limited.RetryAfter <= 500*time.Millisecond, "retry after %v at 2 a second", limited.RetryAfter)
	require.NoError(t, l.Allow(ctx, "u-2"), "another buyer's bucket")

	time.Sleep(limited.RetryAfter) // the wait the 429 promises is enough
	require.NoError(t, l.Allow(ctx, "u-1"))
}

// TestBuyerLimitAcrossInstances: a buyer spread over three instances gets one bucket, not three.
// Its requests go round the instances as fast as they answer; by Redis's clock, no more pass than
// the burst and the rate allow.
func TestBuyerLimitAcrossInstances(t *testing.T) {
	const (
		rate     = 1
		burst    = 3
		requests = 24
	)
	ctx := t.Context()
	prefix := keyPrefix(t)
	limiters := make([]*frontdoor.Limiter, 3)
	for i := range limiters {
		var err error
		limiters[i], err = frontdoor.NewLimiter(backendtest.Redis(t), frontdoor.BuyerLimit{Rate: rate, Burst: burst}, frontdoor.Options{Prefix: prefix})
		require.NoError(t, err)
	}
	clock := backendtest.Redis(t)
	begin := redisNow(t, clock)
	passed := 0
	for i := range requests {
		err := limiters[i%3].Allow(ctx, "u-1")
		if err == nil {
			passed++
			continue
		}
		require.True(t, errors.Is(err, frontdoor.ErrRateLimited), "%v", err)
	}
	elapsed := redisNow(t, clock).Sub(begin)
	most := burst + int(math.Ceil(rate*elapsed.Seconds()))
	assert.GreaterOrEqual(t, passed, burst, "the burst passes")
	assert.LessOrEqual(t, passed, most, "a buyer spread over three instances got more than its bucket: %d passed in %v, at most %d allowed", passed, elapsed, most)
}
