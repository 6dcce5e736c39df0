package attack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/quantile"
)

// EndWithin is how long after its sale's last answer every 202 must have ended (docs/lifecycle.md,
// "Every 202 ends"): placed or rejected. A 202 still queued then fails the run.
const EndWithin = 10 * time.Second

// pollWait is the ?wait= of each poll: the server holds the answer until the order leaves
// queued, so the moment a poll returns is the moment a client learns the final state.
const pollWait = 5 * time.Second

// followers bounds the polls in flight: each one holds a connection to a service instance.
const followers = 256

// Accepted is what became of one 202 — an order's, or a checkout's: when it was answered and
// when a client polling it learned the final state.
type Accepted struct {
	OrderID  string                  `json:"order_id"` // a checkout's id, for a checkout
	UserID   string                  `json:"user_id"`
	Accepted time.Time               `json:"accepted"`         // when the 202 was answered
	Ended    time.Time               `json:"ended"`            // when a poll first saw it leave queued; zero: it never did
	Status   string                  `json:"status,omitempty"` // its final status; "" while it never ended
	Reason   string                  `json:"reason,omitempty"` // why it was rejected
	Lines    []contract.CheckoutLine `json:"lines,omitempty"`  // a checkout's, each an order once placed
}

// polled is what a poll reads of an order or a checkout.
type polled struct {
	OrderID    string                  `json:"order_id"`
	CheckoutID string                  `json:"checkout_id"`
	UserID     string                  `json:"user_id"`
	Status     string                  `json:"status"`
	Reason     string                  `json:"reason"`
	Lines      []contract.CheckoutLine `json:"lines"`
}

// Placed reports whether the order ended as an order row (pending or confirmed).
func (q Accepted) Placed() bool { return q.Status == "pending" || q.Status == "confirmed" }

// follower polls the order (or checkout) of every 202 as a client would, from the moment the
// 202 arrives, with GET /api/v1/orders/{id}?wait=5s (/api/v1/checkouts/{id}) until it leaves
// queued or the follower is stopped.
type follower struct {
	client *http.Client
	ctx    context.Context
	stop   context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	out    []Accepted
}

func newFollower(ctx context.Context, timeout time.Duration) *follower {
	ctx, stop := context.WithCancel(ctx)
	transport := &http.Transport{MaxIdleConnsPerHost: followers, MaxConnsPerHost: followers, IdleConnTimeout: 30 * time.Second}
	return &follower{client: &http.Client{Transport: transport, Timeout: pollWait + timeout}, ctx: ctx, stop: stop,
		sem: make(chan struct{}, followers)}
}

// follow starts polling the order or checkout a 202 answered; r is the 202.
func (f *follower) follow(r *vegeta.Result) {
	var o polled
	u, err := url.Parse(r.URL)
	q := Accepted{Accepted: r.End()}
	if err != nil || json.Unmarshal(r.Body, &o) != nil || o.OrderID == "" && o.CheckoutID == "" {
		// A 202 that names no order can never be seen to end: it counts as one that did not.
		f.record(q)
		return
	}
	q.OrderID, q.UserID, q.Lines = o.OrderID, o.UserID, o.Lines
	path := "/api/v1/orders/"
	if o.CheckoutID != "" {
		q.OrderID, path = o.CheckoutID, "/api/v1/checkouts/"
	}
	poll := u.Scheme + "://" + u.Host + path + url.PathEscape(q.OrderID) + "?wait=" + pollWait.String()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		select {
		case f.sem <- struct{}{}:
			defer func() { <-f.sem }()
		case <-f.ctx.Done():
			f.record(q)
			return
		}
		for f.ctx.Err() == nil {
			got, ok := f.get(poll)
			if ok && got.Status != contract.StatusQueued {
				q.Ended, q.Status, q.Reason = time.Now(), got.Status, got.Reason
				break
			}
			if !ok {
				// A failed poll (a restarting instance, a 5xx) is tried again, as a client would.
				select {
				case <-time.After(100 * time.Millisecond):
				case <-f.ctx.Done():
				}
			}
		}
		f.record(q)
	}()
}

// get is one poll: the order or checkout, and whether it was answered 200.
func (f *follower) get(poll string) (polled, bool) {
	var o polled
	req, err := http.NewRequestWithContext(f.ctx, http.MethodGet, poll, nil)
	if err != nil {
		return o, false
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return o, false
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return o, false
	}
	return o, json.Unmarshal(raw, &o) == nil
}

func (f *follower) record(q Accepted) {
	f.mu.Lock()
	f.out = append(f.out, q)
	f.mu.Unlock()
}

// finish gives the polls until within after end — the sale's last answer — then stops the ones
// still waiting and returns what became of every 202.
func (f *follower) finish(end time.Time, within time.Duration) []Accepted {
	t := time.AfterFunc(time.Until(end.Add(within)), f.stop)
	f.wg.Wait()
	t.Stop()
	f.stop()
	f.client.CloseIdleConnections()
	return f.out
}

// Queue holds the figures of a queued sale: how fast orders were accepted (202) and placed,
// how long a buyer waited from the 202 to the final state, and how many 202s never ended.
type Queue struct {
	Accepted          int           `json:"accepted"`
	Placed            int           `json:"placed"`
	Rejected          int           `json:"rejected"`
	Unended           int           `json:"unended"` // still queued EndWithin after the sale: each one fails the run
	AcceptedPerSecond float64       `json:"accepted_per_second"`
	PlacedPerSecond   float64       `json:"placed_per_second"`
	EndP50            time.Duration `json:"end_p50"` // from the 202 to the final state
	EndP99            time.Duration `json:"end_p99"`
}

// NewQueue measures a sale's 202s: accepted/s from its first request to its last 202,
// placed/s from its first request to the last placement a client saw, and the percentiles of the
// time from 202 to the final state over the 202s that ended; nil for a sale without a 202.
func NewQueue(results []*vegeta.Result, queued []Accepted) *Queue {
	if len(queued) == 0 {
		return nil
	}
	var first, lastAccepted, lastPlaced time.Time
	for _, r := range results {
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
	}
	f := Queue{Accepted: len(queued)}
	var ends []time.Duration
	for _, q := range queued {
		lastAccepted = maxTime(lastAccepted, q.Accepted)
		switch {
		case q.Ended.IsZero():
			f.Unended++
			continue
		case q.Placed():
			f.Placed++
			lastPlaced = maxTime(lastPlaced, q.Ended)
		case q.Status == contract.StatusRejected:
			f.Rejected++
		}
		ends = append(ends, q.Ended.Sub(q.Accepted))
	}
	f.AcceptedPerSecond = perSecond(f.Accepted, first, lastAccepted)
	f.PlacedPerSecond = perSecond(f.Placed, first, lastPlaced)
	f.EndP50, f.EndP99 = quantile.Of(ends, 0.5), quantile.Of(ends, 0.99)
	return &f
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func perSecond(n int, from, to time.Time) float64 {
	if n == 0 || !to.After(from) {
		return 0
	}
	return float64(n) / to.Sub(from).Seconds()
}
