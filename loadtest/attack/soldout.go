package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/verify"
)

// soldOutMaxRate bounds the steady phase in count as well as in time: at most this many requests
// per second of the phase. It is well above what one machine's loopback serves, so it only stops
// a phase whose clock went wrong, never a real one.
const soldOutMaxRate = 100_000

// Steady is the steady sold-out measurement: after a product sold out, fresh buyers keep ordering
// it for a fixed time. Every answer should be 409 sold_out, given without touching the hot row;
// its rate next to a bare handler's is what rejecting early is worth.
type Steady struct {
	Duration   time.Duration   `json:"duration"`
	Requests   int             `json:"requests"`
	Outcomes   map[string]int  `json:"outcomes"`
	TooMany    int             `json:"status_429"`          // busy or rate limited: reported, not a failure
	Server     int             `json:"status_5xx"`          // reported; a 500 (ServerError) fails the run, a 503 does not
	Throughput float64         `json:"requests_per_second"` // answered requests over the phase
	P50        time.Duration   `json:"p50"`
	P90        time.Duration   `json:"p90"`
	P99        time.Duration   `json:"p99"`
	VsBare     float64         `json:"vs_bare,omitempty"` // Throughput over Bare's
	Bare       *Steady         `json:"bare,omitempty"`    // the bare handler, measured just before this phase
	Verdict    *verify.Verdict `json:"verdict,omitempty"` // the invariant checked again after the phase
	Skipped    string          `json:"skipped,omitempty"`

	Acked []verify.Order `json:"-"` // 201s of the phase: each one is an oversell
	CPU   *cpu.Phase     `json:"-"` // what the service's slices cost in CPU, moved to the row's report
}

// Slices accumulates a sold-out phase run in slices — interleaved with the bare handler's,
// so that both see the same machine — into one measurement.
type Slices struct {
	s        Steady
	m        vegeta.Metrics
	answered int
	window   time.Duration // the slices' own time, from each one's first request to its last answer
	sent     int           // buyers used so far: each slice's are new
}

// SoldOutSlice attacks the product for d, one slice of the phase, into p: the closed model with
// l.concurrency clients, whatever l.rate says (the phase measures capacity, which a fixed rate
// would hide). Every request is a fresh buyer with a fresh Idempotency-Key, so none can be
// answered from a repeat-buyer or idempotency shortcut. Results are aggregated as they arrive,
// not kept: a fast phase sends far more requests than a sale.
func (l Load) SoldOutSlice(ctx context.Context, name string, d time.Duration, p *Slices) {
	attacker, transport := l.newAttacker()
	defer transport.CloseIdleConnections()
	stop := context.AfterFunc(ctx, func() { attacker.Stop() })
	defer stop()
	l.Rate = 0
	limit := max(l.Concurrency, int(d.Seconds()*soldOutMaxRate))
	first, from := l.First+l.Requests, p.sent // indexes of the sale's own requests stay theirs: keys and buyers are new
	p.sent += limit
	at := func(n int) request {
		return request{index: first + from + n, user: fmt.Sprintf("%s-s%07d", l.SKU, from+n)}
	}
	bar := newBar(l.Progress, -1, name+" sold out")
	if p.s.Outcomes == nil {
		p.s.Outcomes = map[string]int{}
	}
	p.s.Duration += d
	var began, ended time.Time
	for r := range attacker.Attack(l.targeter(limit, at), l.pacer(), d, name+" sold out") {
		if r.Error == vegeta.ErrNoTargets.Error() {
			continue
		}
		p.m.Add(r)
		if began.IsZero() || r.Timestamp.Before(began) {
			began = r.Timestamp
		}
		if end := r.Timestamp.Add(r.Latency); end.After(ended) {
			ended = end
		}
		outcome := Classify(r)
		p.s.Outcomes[outcome]++
		switch {
		case r.Code == http.StatusTooManyRequests:
			p.s.TooMany++
		case r.Code >= 500:
			p.s.Server++
		}
		if r.Code != 0 {
			p.answered++
		}
		if r.Code == http.StatusCreated {
			var o verify.Order
			if json.Unmarshal(r.Body, &o) == nil && o.OrderID != "" {
				p.s.Acked = append(p.s.Acked, o)
			}
		}
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if ended.After(began) {
		p.window += ended.Sub(began)
	}
}

// Steady is the measurement of all the slices: answered requests over their own time, latency
// percentiles over all their requests.
func (p *Slices) Steady() Steady {
	p.m.Close()
	s := p.s
	s.Requests = int(p.m.Requests)
	s.P50, s.P90, s.P99 = p.m.Latencies.P50, p.m.Latencies.P90, p.m.Latencies.P99
	if p.window > 0 {
		s.Throughput = float64(p.answered) / p.window.Seconds()
	}
	return s
}

// Answered is how many of the slices' requests were answered (a transport error is not).
func (p *Slices) Answered() int { return p.answered }

// Unexpected is how many answers were none of 409 sold_out, 201, 429 or 5xx (which are
// reported on their own): a transport error, another 4xx.
func (s Steady) Unexpected() int {
	return s.Requests - s.Outcomes[SoldOut] - s.Outcomes[OK] - s.TooMany - s.Server
}
