// Package attack is the load tool's traffic: one sale's orders sent through vegeta (one buyer and
// one Idempotency-Key per request, busy answers retried after their Retry-After), each answer
// classified by status and error code, the selling phase split from the sold-out phase, and the
// steady sold-out measurement run in slices.
package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/loadtest/verify"
)

// Load describes one sale's traffic.
type Load struct {
	Targets     []string      // base URLs, used round-robin
	SKU         string        // the product on sale
	First       int           // the index of the first request (and buyer): rounds of fresh buyers start past the last
	Strategy    string        // "" = the server's default
	Users       int           // distinct buyers
	Requests    int           // order requests in the first round (more than users: repeat buyers)
	Rate        int           // requests per second (open model); 0 = closed model
	Concurrency int           // workers (closed model) or a cap on in-flight requests (open model)
	Duration    time.Duration // upper bound of one round
	Timeout     time.Duration // per request
	RetryRounds int           // rounds that retry the busy (429) answers, honouring Retry-After
	EndWithin   time.Duration // how long after the sale every 202 has to end; 0: EndWithin
	Progress    io.Writer     // where the progress bar goes; nil: none
	// Lines, when set, makes every request a checkout of one unit of each of these products
	// (POST /api/v1/checkouts) instead of an order of SKU, which then only names the buyers.
	Lines []string
}

// request is one order attempt: the buyer, and the Idempotency-Key that its retries reuse.
type request struct {
	index int
	user  string
}

// Sale is everything one sale's clients saw.
type Sale struct {
	Results []*vegeta.Result       // every attempt of every round
	Final   map[int]*vegeta.Result // request index -> its last attempt
	Acked   []verify.Order         // one per request answered 201, and per 202 that ended placed
	Queued  []Accepted             // one per request answered 202: what became of it
}

// Run sends the load: a first round with every request, then, while some were answered busy
// and rounds remain, a round with just those after the longest Retry-After they were given.
func (l Load) Run(ctx context.Context, name string) (Sale, error) {
	s := Sale{Final: map[int]*vegeta.Result{}}
	f := newFollower(ctx, l.Timeout)
	round := make([]request, l.Requests)
	for i := range round {
		round[i] = request{index: l.First + i, user: l.user(l.First + i)}
	}
	for n := 0; len(round) > 0 && ctx.Err() == nil; n++ {
		results := l.attack(ctx, name, round, f)
		s.Results = append(s.Results, results...)
		var busy []request
		wait := time.Duration(0)
		for _, r := range results {
			i := requestIndex(r)
			if i < 0 {
				continue
			}
			s.Final[i] = r
			if Classify(r) == Busy {
				busy = append(busy, request{index: i, user: l.user(i)})
				wait = max(wait, retryAfter(r))
			}
		}
		if n >= l.RetryRounds {
			break
		}
		round = busy
		if len(round) > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
	var end time.Time
	for _, r := range s.Results {
		end = maxTime(end, r.End())
	}
	within := l.EndWithin
	if within == 0 {
		within = EndWithin
	}
	s.Queued = f.finish(end, within)
	for _, q := range s.Queued {
		switch {
		case !q.Placed():
		case len(q.Lines) > 0:
			for _, line := range q.Lines {
				s.Acked = append(s.Acked, verify.Order{OrderID: line.OrderID, UserID: q.UserID, Status: q.Status, SKU: line.SKU})
			}
		default:
			s.Acked = append(s.Acked, verify.Order{OrderID: q.OrderID, UserID: q.UserID, Status: q.Status})
		}
	}
	for _, r := range s.Final {
		if r.Code == http.StatusCreated && len(l.Lines) > 0 {
			var co contract.Checkout
			if err := json.Unmarshal(r.Body, &co); err != nil || len(co.Lines) != len(l.Lines) {
				return s, fmt.Errorf("a 201 without a whole checkout: %q", r.Body)
			}
			for _, line := range co.Lines {
				s.Acked = append(s.Acked, verify.Order{OrderID: line.OrderID, UserID: co.UserID, Status: co.Status, SKU: line.SKU})
			}
		} else if r.Code == http.StatusCreated {
			var o verify.Order
			if err := json.Unmarshal(r.Body, &o); err != nil || o.OrderID == "" {
				return s, fmt.Errorf("a 201 without an order: %q", r.Body)
			}
			s.Acked = append(s.Acked, o)
		}
	}
	return s, ctx.Err()
}

// user is the buyer of request i: users of their own per load, repeated when it sends more
// requests than it has users.
func (l Load) user(i int) string { return fmt.Sprintf("%s-u%06d", l.SKU, l.First+(i-l.First)%l.Users) }

// attack runs one round through vegeta; f follows each 202 from the moment it arrives, so that
// the time to its final state is a client's, not the rest of the round's.
func (l Load) attack(ctx context.Context, name string, round []request, f *follower) []*vegeta.Result {
	attacker, transport := l.newAttacker()
	defer transport.CloseIdleConnections()
	stop := context.AfterFunc(ctx, func() { attacker.Stop() })
	defer stop()
	bar := newBar(l.Progress, len(round), name)
	var results []*vegeta.Result
	for r := range attacker.Attack(l.targeter(len(round), func(n int) request { return round[n] }), l.pacer(), l.Duration, name) {
		if r.Error == vegeta.ErrNoTargets.Error() {
			continue // a worker asked for a target after the last one: not a request
		}
		results = append(results, r)
		if r.Code == http.StatusAccepted {
			f.follow(r)
		}
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return results
}

// newAttacker builds the attacker of a round or phase: concurrency workers, and its own
// transport, which the caller closes when the round ends (CloseIdleConnections): left idle,
// every round's connections would pile up on the servers and look like a leak in a soak.
func (l Load) newAttacker() (*vegeta.Attacker, *http.Transport) {
	workers := uint64(l.Concurrency)
	transport := &http.Transport{MaxIdleConnsPerHost: l.Concurrency, MaxConnsPerHost: l.Concurrency, IdleConnTimeout: 30 * time.Second}
	attacker := vegeta.NewAttacker(
		vegeta.Workers(workers), vegeta.MaxWorkers(workers), vegeta.MaxBody(4096),
		vegeta.Client(&http.Client{Transport: transport, Timeout: l.Timeout}),
	)
	return attacker, transport
}

// pacer is the open model at l.Rate, or the closed model: each worker sends its next request
// when answered.
func (l Load) pacer() vegeta.Pacer {
	if l.Rate > 0 {
		return vegeta.Rate{Freq: l.Rate, Per: time.Second}
	}
	return vegeta.Rate{Freq: 0}
}

// newBar is a progress bar on w, or nil without one; total -1 is a counter with no end.
func newBar(w io.Writer, total int, name string) *progressbar.ProgressBar {
	if w == nil {
		return nil
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(name), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}

// targeter hands out n requests, the nth being at(n), one buyer each, round-robin over the
// targets. The request index rides in the query string (the server ignores it) so that each
// result can be matched to its request; the Idempotency-Key makes a retried request safe to send
// again.
func (l Load) targeter(n int, at func(int) request) vegeta.Targeter {
	var next atomic.Int64
	return func(t *vegeta.Target) error {
		i := int(next.Add(1) - 1)
		if i >= n {
			return vegeta.ErrNoTargets
		}
		r := at(i)
		body := map[string]any{"user_id": r.user, "quantity": 1}
		path := "/api/v1/products/" + url.PathEscape(l.SKU) + "/orders"
		if len(l.Lines) > 0 {
			lines := make([]map[string]any, len(l.Lines))
			for j, sku := range l.Lines {
				lines[j] = map[string]any{"sku": sku, "quantity": 1}
			}
			body = map[string]any{"user_id": r.user, "lines": lines}
			path = "/api/v1/checkouts"
		}
		if l.Strategy != "" {
			body["strategy"] = l.Strategy
		}
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		t.Method = http.MethodPost
		t.URL = fmt.Sprintf("%s%s?lt=%d", l.Targets[r.index%len(l.Targets)], path, r.index)
		t.Body = raw
		t.Header = http.Header{
			"Content-Type":    []string{"application/json"},
			"Idempotency-Key": []string{fmt.Sprintf("%s/%d", l.SKU, r.index)},
		}
		return nil
	}
}

// requestIndex reads back the request index of a result, or -1.
func requestIndex(r *vegeta.Result) int {
	u, err := url.Parse(r.URL)
	if err != nil {
		return -1
	}
	i, err := strconv.Atoi(u.Query().Get("lt"))
	if err != nil {
		return -1
	}
	return i
}

// retryAfter is the wait a 429 asked for; one second when it did not say.
func retryAfter(r *vegeta.Result) time.Duration {
	if s, err := strconv.Atoi(r.Headers.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	return time.Second
}
