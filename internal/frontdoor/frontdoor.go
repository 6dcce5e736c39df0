// Package frontdoor is what a flash sale's crowd meets before the order endpoint
// (docs/frontdoor.md): who a buyer is (Verifier: the sub of a token signed by the deployment's
// identity provider), when a buyer may come in (Room: a waiting room per product, Passes: the pass
// it hands out), and how often (Limiter: a token bucket per buyer). What every instance must agree
// on — the queue, its serving counter, the buckets, the pass key — lives in Redis; what one
// instance can decide alone — a token's signature, a pass's — it decides without a round trip.
package frontdoor

import (
	"fmt"
	"strings"
	"time"
)

// codedError is an error of the front door named by its API code (stock.Code asks for Code).
type codedError struct{ code, msg string }

func (e *codedError) Error() string { return e.msg }

// Code is the error's code in the API.
func (e *codedError) Code() string { return e.code }

// The front door's refusals, beside the stock errors a room answers (not found, sold out, sale
// ended, unavailable). Each carries its API code.
var (
	// ErrUnauthenticated means the request carries no valid buyer token: 401 unauthenticated.
	ErrUnauthenticated error = &codedError{"unauthenticated", "no valid buyer token"}
	// ErrPassRequired means an order of a product with a waiting room came without its pass:
	// 403 pass_required.
	ErrPassRequired error = &codedError{"pass_required", "this product's pass is required"}
	// ErrPassInvalid means the pass is forged, expired, or another buyer's or product's: 403
	// pass_invalid.
	ErrPassInvalid error = &codedError{"pass_invalid", "the pass is not valid for this buyer and product"}
	// ErrRateLimited means the buyer is over its token bucket; see RateLimitedError.
	ErrRateLimited error = &codedError{"rate_limited", "too many requests from this buyer"}
)

// RateLimitedError is ErrRateLimited with the time until the buyer's next request would pass.
// The handler sends it as Retry-After, in whole seconds rounded up, at least 1.
type RateLimitedError struct{ RetryAfter time.Duration }

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("%v; retry after %v", ErrRateLimited, e.RetryAfter)
}

// Code is the error's code in the API.
func (e *RateLimitedError) Code() string { return "rate_limited" }

// Unwrap makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// Options are what the front door's parts share beyond their Redis client; the zero value is
// the default.
type Options struct {
	// Prefix starts every Redis key; "": "seckill:". Tests give each its own.
	Prefix string
	// Clock times the passes' expiry, so that a test moves past one instead of waiting it out;
	// nil: time.Now. The waiting room and the buckets run on Redis's clock, never this one.
	Clock func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "seckill:"
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// bearer is the token of an Authorization header "Bearer <token>" (the scheme in any case, as
// RFC 7235 has it), or "".
func bearer(authorization string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
