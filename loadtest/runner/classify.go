package runner

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/loadtest/cpu"
)

// Outcomes of one request, from its status and the error code of the contract (openapi.yaml).
const (
	outcomeOK               = "ok"
	outcomeSoldOut          = "sold_out"
	outcomeAlreadyPurchased = "already_purchased"
	outcomeBusy             = "busy"
	outcomeInvalid          = "invalid_argument"
	outcomeUnavailable      = "unavailable"
	outcomeOtherClient      = "other_4xx"
	outcomeServerError      = "server_error"
	outcomeTransport        = "transport_error"
)

// classify names the outcome of one result.
func classify(r *vegeta.Result) string {
	switch {
	case r.Code == 0:
		return outcomeTransport
	case r.Code == http.StatusCreated:
		return outcomeOK
	case r.Code >= 500 && r.Code != http.StatusServiceUnavailable:
		return outcomeServerError
	}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &body)
	switch code := body.Error.Code; code {
	case outcomeSoldOut, outcomeAlreadyPurchased, outcomeBusy, outcomeInvalid, outcomeUnavailable:
		return code
	}
	if r.Code == http.StatusServiceUnavailable {
		return outcomeUnavailable
	}
	return outcomeOtherClient
}

// phase is a slice of a sale's results with their vegeta metrics.
type phase struct {
	Requests   int           `json:"requests"`
	Throughput float64       `json:"requests_per_second"`
	P50        time.Duration `json:"p50"`
	P90        time.Duration `json:"p90"`
	P99        time.Duration `json:"p99"`
}

func newPhase(results []*vegeta.Result) phase {
	if len(results) == 0 {
		return phase{}
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
	p := phase{Requests: len(results), P50: m.Latencies.P50, P90: m.Latencies.P90, P99: m.Latencies.P99}
	if d := last.Sub(first); d > 0 {
		p.Throughput = float64(len(results)) / d.Seconds()
	}
	return p
}

// split divides results into the selling phase — requests sent before the last sale was
// answered — and the sold-out phase after it. The two behave differently (the selling phase
// queues on the lock; the sold-out phase should be answered without it), so they are reported
// apart.
func split(results []*vegeta.Result) (selling, soldOut []*vegeta.Result) {
	var lastSale time.Time
	for _, r := range results {
		if r.Code == http.StatusCreated && r.End().After(lastSale) {
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

// ordersPerSecond is the rate of successful orders over the selling phase.
func ordersPerSecond(selling []*vegeta.Result) float64 {
	first, last, orders := sellingWindow(selling)
	if orders == 0 || !last.After(first) {
		return 0
	}
	return float64(orders) / last.Sub(first).Seconds()
}

// sellingWindow is the span a sale's orders/s is measured over — from its first request to its
// last sale's answer — and the orders in it. The results may include the sold-out phase's: it
// begins after the window.
func sellingWindow(results []*vegeta.Result) (first, last time.Time, orders int) {
	for _, r := range results {
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if r.Code == http.StatusCreated {
			orders++
			if r.End().After(last) {
				last = r.End()
			}
		}
	}
	return first, last, orders
}

// sellingCPU is the cost of a sale's selling phase, recorded by rec: from its first request to its
// last sale's answer, the window its orders/s is measured over; nil without a sale.
func sellingCPU(m *cpu.Meter, rec *cpu.Recording, results []*vegeta.Result) *cpu.Phase {
	from, to, orders := sellingWindow(results)
	if orders == 0 {
		return nil
	}
	return m.Phase(rec.Between(from, to), orders)
}
