package handler

import (
	"maps"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// RateLimit is the per-client token bucket: Rate requests per second on average, bursts of up
// to Burst. A zero Rate turns limiting off.
type RateLimit struct {
	Rate  float64
	Burst int
}

// clientLimiter keeps one token bucket per client address. Buckets idle for a minute are
// dropped, so the map stays as large as the set of recent clients.
type clientLimiter struct {
	limit RateLimit
	mu    sync.Mutex
	seen  map[string]*bucket
	calls int
}

type bucket struct {
	*rate.Limiter
	last time.Time
}

// allow takes a token from client's bucket.
func (l *clientLimiter) allow(client string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls++; l.calls%1024 == 0 {
		maps.DeleteFunc(l.seen, func(_ string, b *bucket) bool { return now.Sub(b.last) > time.Minute })
	}
	b := l.seen[client]
	if b == nil {
		b = &bucket{Limiter: rate.NewLimiter(rate.Limit(l.limit.Rate), max(1, l.limit.Burst))}
		l.seen[client] = b
	}
	b.last = now
	return b.AllowN(now, 1)
}

// middleware answers 429 rate_limited (with Retry-After) to a client over its budget. The client
// is its address as gin sees it: the connection's peer, or the address a trusted proxy reports.
func (l *clientLimiter) middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !l.allow(c.ClientIP(), time.Now()) {
			fail(c, errRateLimited, "")
			return
		}
		c.Next()
	}
}
