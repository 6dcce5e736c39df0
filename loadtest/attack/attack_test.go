package attack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// result builds a vegeta result as the attacker would record it.
func result(code uint16, body string, at, latency time.Duration) *vegeta.Result {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	return &vegeta.Result{Code: code, Body: []byte(body), Timestamp: t0.Add(at), Latency: latency}
}

func errBody(code string) string { return `{"error":{"code":"` + code + `","message":"m"}}` }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *vegeta.Result
		want string
	}{
		{"created", result(201, `{"order_id":"x"}`, 0, 0), OK},
		{"accepted", result(202, `{"order_id":"x","status":"queued"}`, 0, 0), Queued},
		{"sold out", result(409, errBody("sold_out"), 0, 0), SoldOut},
		{"already purchased", result(409, errBody("already_purchased"), 0, 0), AlreadyPurchased},
		{"busy", result(429, errBody("busy"), 0, 0), Busy},
		{"invalid", result(400, errBody("invalid_argument"), 0, 0), Invalid},
		{"unavailable", result(503, errBody("unavailable"), 0, 0), Unavailable},
		{"503 without a body", result(503, ``, 0, 0), Unavailable},
		{"server error", result(500, errBody("internal"), 0, 0), ServerError},
		{"bad gateway", result(502, `<html>`, 0, 0), ServerError},
		{"other 4xx", result(409, errBody("idempotency_conflict"), 0, 0), OtherClient},
		{"not json", result(404, `nope`, 0, 0), OtherClient},
		{"transport", &vegeta.Result{Code: 0, Error: "connection refused"}, Transport},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Classify(tc.r)) })
	}
}

// TestSplit: requests sent up to the last sale's answer are the selling phase; the rest are the
// sold-out phase, whatever order they arrive in.
func TestSplit(t *testing.T) {
	ms := time.Millisecond
	results := []*vegeta.Result{
		result(409, errBody("sold_out"), 30*ms, ms),
		result(201, `{}`, 0, 10*ms),
		result(201, `{}`, 5*ms, 15*ms), // the last sale: answered at 20ms
		result(429, errBody("busy"), 12*ms, ms),
		result(409, errBody("sold_out"), 20*ms, ms),
		result(409, errBody("sold_out"), 21*ms, ms),
	}
	selling, soldOut := Split(results)
	assert.Len(t, selling, 4)
	assert.Len(t, soldOut, 2)
	for _, r := range soldOut {
		assert.True(t, r.Timestamp.After(results[2].End()))
	}
	assert.InDelta(t, 100.0, OrdersPerSecond(selling), 0.01, "two orders between 0 and 20ms")

	// A 202 is the queued strategy's sale: its unit is held for the order, so the selling phase
	// runs to the last one.
	queued := []*vegeta.Result{result(202, `{}`, 0, 10*ms), result(202, `{}`, 5*ms, 15*ms), result(409, errBody("sold_out"), 30*ms, ms)}
	selling, soldOut = Split(queued)
	assert.Len(t, selling, 2)
	assert.Len(t, soldOut, 1)
	assert.InDelta(t, 100.0, OrdersPerSecond(selling), 0.01, "two 202s between 0 and 20ms")

	none, all := Split([]*vegeta.Result{result(409, errBody("sold_out"), 0, ms)})
	assert.Empty(t, none, "no sale: everything is sold-out phase")
	assert.Len(t, all, 1)
	assert.Zero(t, OrdersPerSecond(none))
	assert.Equal(t, Phase{}, NewPhase(nil))
}
