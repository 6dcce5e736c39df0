// Package buyer is the in-process client of the test suites and the lab: one buyer places one
// order through service instances, as a well-behaved client does, and records what it was told.
package buyer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flashsale/seckill/internal/stock"
)

// Place places one order: a service instance's PlaceOrder, or a form of a lab experiment.
type Place func(ctx context.Context, req stock.OrderRequest) (order stock.Order, replayed bool, err error)

// A Buyer places one order. Busy is no answer to a purchase, only "ask again": the buyer asks
// again after a short jittered pause, until Until or the context's end. Its last answer is its
// outcome; an internal one is never counted as an answer (Buy returns it as an error).
type Buyer struct {
	ID int // its client id in a history
	// Places take its attempts in turn, as a load balancer would; with one, every attempt goes
	// there.
	Places []Place
	// Until ends the retries; zero: the context's end.
	Until time.Time
	// Unavailable retries unavailable answers too, after a longer pause: a backend is down, not
	// a lock held. Give the request an Idempotency-Key: an attempt whose outcome was unknown may
	// have placed the order, and the retry then finds it instead of placing a second one.
	Unavailable bool
	// Attempt bounds each attempt; zero: the context alone.
	Attempt time.Duration
}

// Outcome is what a buyer was told.
type Outcome struct {
	Order    stock.Order
	Replayed bool           // the order came back by its Idempotency-Key
	Err      error          // the last answer; nil: an order
	Retried  map[string]int // the answers asked again, by code
	Slowest  time.Duration  // the longest attempt
	// Op is the purchase in a history: from the first attempt's call to the last's return, with
	// the last's code. Times are from one origin for every buyer of the process (Elapsed), so
	// that the histories of several waves of one sale line up.
	Op porcupine.Operation
}

// Code is the last answer's code: "ok" for an order.
func (o Outcome) Code() string { return stock.Code(o.Err) }

// Retries is how many answers were asked again.
func (o Outcome) Retries() int {
	n := 0
	for _, c := range o.Retried {
		n += c
	}
	return n
}

// origin is the zero of every history's times.
var origin = time.Now()

// Elapsed is the time since the origin of every history, on the monotonic clock, in
// nanoseconds: for a history operation the buyer does not record (a cancel).
func Elapsed() int64 { return time.Since(origin).Nanoseconds() }

// Buy places req. It returns an error when the last answer was internal: no client can act on
// a 500, and a fault or a load must never cause one.
func (b Buyer) Buy(ctx context.Context, req stock.OrderRequest) (Outcome, error) {
	out := Outcome{Op: porcupine.Operation{ClientId: b.ID, Input: req.Quantity, Call: Elapsed()}}
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if b.Attempt > 0 {
			actx, cancel = context.WithTimeout(ctx, b.Attempt)
		}
		sent := time.Now()
		out.Order, out.Replayed, out.Err = b.Places[attempt%len(b.Places)](actx, req)
		out.Slowest = max(out.Slowest, time.Since(sent))
		cancel()
		pause, again := b.retry(out.Err)
		if !again || ctx.Err() != nil || (!b.Until.IsZero() && time.Now().After(b.Until)) {
			break
		}
		if out.Retried == nil {
			out.Retried = map[string]int{}
		}
		out.Retried[out.Code()]++
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
	out.Op.Output, out.Op.Return = out.Code(), Elapsed()
	if out.Code() == "internal" {
		return out, fmt.Errorf("%s was answered an internal error: %w", req.UserID, out.Err)
	}
	return out, nil
}

// retry says whether err is asked again, and after what pause: a client's pace, jittered so
// that the buyers turned away together do not come back together.
func (b Buyer) retry(err error) (time.Duration, bool) {
	switch code := stock.Code(err); {
	case code == "busy":
		return time.Millisecond + rand.N(10*time.Millisecond), true
	case b.Unavailable && code == "unavailable":
		return 20*time.Millisecond + rand.N(30*time.Millisecond), true
	}
	return 0, false
}
