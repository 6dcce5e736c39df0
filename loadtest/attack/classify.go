package attack

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Outcomes of one request, from its status and the error code of the contract (openapi.yaml).
const (
	OK               = "ok"
	Queued           = "queued" // 202: accepted by the queued strategy, its order placed or rejected later
	SoldOut          = "sold_out"
	AlreadyPurchased = "already_purchased"
	Busy             = "busy"
	Invalid          = "invalid_argument"
	Unavailable      = "unavailable"
	OtherClient      = "other_4xx"
	ServerError      = "server_error"
	Transport        = "transport_error"
)

// Classify names the outcome of one result.
func Classify(r *vegeta.Result) string {
	switch {
	case r.Code == 0:
		return Transport
	case r.Code == http.StatusCreated:
		return OK
	case r.Code == http.StatusAccepted:
		return Queued
	case r.Code >= 500 && r.Code != http.StatusServiceUnavailable:
		return ServerError
	}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &body)
	switch code := body.Error.Code; code {
	case SoldOut, AlreadyPurchased, Busy, Invalid, Unavailable:
		return code
	}
	if r.Code == http.StatusServiceUnavailable {
		return Unavailable
	}
	return OtherClient
}

// Phase is a slice of a sale's results with their vegeta metrics.
type Phase struct {
	Requests   int           `json:"requests"`
	Throughput float64       `json:"requests_per_second"`
	P50        time.Duration `json:"p50"`
	P90        time.Duration `json:"p90"`
	P99        time.Duration `json:"p99"`
}

// NewPhase measures results as one phase: how many, how fast, and the latency percentiles.
func NewPhase(results []*vegeta.Result) Phase {
	if len(results) == 0 {
		return Phase{}
	}
	var m vegeta.Metrics
	for _, r := range results {
		m.Add(r)
	}
	m.Close()
	first, last := results[0].Timestamp, results[0].End()
	for _, r := range results {
		if r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if r.End().After(last) {
			last = r.End()
		}
	}
	p := Phase{Requests: len(results), P50: m.Latencies.P50, P90: m.Latencies.P90, P99: m.Latencies.P99}
	if d := last.Sub(first); d > 0 {
		p.Throughput = float64(len(results)) / d.Seconds()
	}
	return p
}

// sale reports whether r sold a unit: a 201, or a 202 (the queued strategy's admission, which
// holds the unit for the order until a writer places or rejects it).
func sale(r *vegeta.Result) bool {
	return r.Code == http.StatusCreated || r.Code == http.StatusAccepted
}

// Split divides results into the selling phase — requests sent before the last sale (201 or
// 202) was answered — and the sold-out phase after it. The two behave differently (the selling phase
// queues on the lock; the sold-out phase should be answered without it), so they are reported
// apart.
func Split(results []*vegeta.Result) (selling, soldOut []*vegeta.Result) {
	var lastSale time.Time
	for _, r := range results {
		if sale(r) && r.End().After(lastSale) {
			lastSale = r.End()
		}
	}
	sorted := append([]*vegeta.Result(nil), results...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Timestamp.Before(sorted[j].Timestamp) })
	for _, r := range sorted {
		if !lastSale.IsZero() && !r.Timestamp.After(lastSale) {
			selling = append(selling, r)
		} else {
			soldOut = append(soldOut, r)
		}
	}
	return selling, soldOut
}

// OrdersPerSecond is the rate of successful orders over the selling phase.
func OrdersPerSecond(selling []*vegeta.Result) float64 {
	first, last, orders := SellingWindow(selling)
	if orders == 0 || !last.After(first) {
		return 0
	}
	return float64(orders) / last.Sub(first).Seconds()
}

// SellingWindow is the span a sale's orders/s is measured over — from its first request to its
// last sale's answer — and the orders (201s and 202s) in it. The results may include the sold-out phase's: it
// begins after the window.
func SellingWindow(results []*vegeta.Result) (first, last time.Time, orders int) {
	for _, r := range results {
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if sale(r) {
			orders++
			if r.End().After(last) {
				last = r.End()
			}
		}
	}
	return first, last, orders
}
