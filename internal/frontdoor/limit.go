package frontdoor

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// BuyerLimit is the per-buyer token bucket: Rate requests a second on average, bursts of up to
// Burst (SECKILL_BUYER_RATE, SECKILL_BUYER_BURST).
type BuyerLimit struct {
	Rate  float64
	Burst int // zero: Rate rounded up, at least 1
}

// A Limiter keeps one token bucket per buyer in Redis, counted across every instance together:
// a buyer who spreads its requests over the instances behind a load balancer gets no more. The
// bucket is redis_rate's GCRA, one key per buyer, on Redis's clock. It is safe for concurrent use.
type Limiter struct {
	limiter  *redis_rate.Limiter
	limit    redis_rate.Limit
	prefix   string
	instance string // names this instance's buckets, in a planted bug only
}

// NewLimiter returns the per-buyer limiter over client. It returns a *stock.InvalidError when
// the limit is not positive.
func NewLimiter(client redis.UniversalClient, limit BuyerLimit, opts Options) (*Limiter, error) {
	if !(limit.Rate > 0) || math.IsInf(limit.Rate, 0) || limit.Burst < 0 {
		return nil, &stock.InvalidError{Msg: "a buyer limit needs a positive rate and a burst of 0 or more"}
	}
	if limit.Burst == 0 {
		limit.Burst = max(1, int(math.Ceil(limit.Rate)))
	}
	opts = opts.withDefaults()
	return &Limiter{
		limiter: redis_rate.NewLimiter(client),
		// One request per period of 1/Rate s: redis_rate counts whole requests per period, and
		// this way a rate below one a second is one too.
		limit:    redis_rate.Limit{Rate: 1, Period: time.Duration(float64(time.Second) / limit.Rate), Burst: limit.Burst},
		prefix:   opts.Prefix,
		instance: randomText(8),
	}, nil
}

// Key is the Redis key of buyer's bucket. The buyer is its hash tag: one key per script, in any
// Redis Cluster slot.
func (l *Limiter) Key(buyer string) string { return "rate:" + l.bucket(buyer) }

// bucket is the name redis_rate is given for buyer's bucket: it puts "rate:" before it.
func (l *Limiter) bucket(buyer string) string {
	name := l.prefix + "{buyer:" + buyer + "}:bucket"
	if planted.On(planted.LimitPerInstance) {
		name += ":" + l.instance
	}
	return name
}

// Allow takes one request from buyer's bucket: nil, or a *RateLimitedError (ErrRateLimited)
// carrying when to retry, or stock.ErrUnavailable (wrapped) when Redis cannot say: a request
// the door cannot judge is refused, never let through (Passes.CheckPass says why).
func (l *Limiter) Allow(ctx context.Context, buyer string) error {
	res, err := l.limiter.Allow(ctx, l.bucket(buyer), l.limit)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("buyer limit: %w", ctx.Err())
		}
		return fmt.Errorf("buyer limit: %w: %w", stock.ErrUnavailable, err)
	}
	if res.Allowed == 0 {
		return &RateLimitedError{RetryAfter: res.RetryAfter}
	}
	return nil
}
