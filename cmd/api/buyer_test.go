package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// buyer is the one HTTP buyer of the process tests: it places orders for one sale, each with
// the same retry rule (buy).
type buyer struct {
	t        *testing.T
	ctx      context.Context // the sale's deadline
	client   *http.Client
	sku      string
	strategy string
}

// buy places user's order and returns its final answer and the process that gave it. A 429
// (busy), a 503 (unavailable) or a lost answer is tried again, with the same Idempotency-Key,
// after a short jittered pause: the outcome of a lost answer is unknown, and the key makes the
// retry return the original order, never a second one. Any other 5xx fails the test (failed),
// and so does the deadline passing before a final answer; ok is then false, as it is when the
// test cancels the sale. to names the
// process of each attempt, asked once just before it is sent; heard, when not nil, is told
// every attempt's outcome, retried or final, so that the test judges every answer.
func (b buyer) buy(user string, to func(attempt int) instance, heard func(p instance, a answer, err error)) (a answer, p instance, ok bool) {
	b.t.Helper()
	body := fmt.Sprintf(`{"user_id":%q,"strategy":%q}`, user, b.strategy)
	for attempt := 0; ; attempt++ {
		p = to(attempt)
		a, err := postOrder(b.ctx, b.client, p.url, b.sku, user, body)
		if heard != nil {
			heard(p, a, err)
		}
		if err == nil && failed(b.t, user, a) {
			return a, p, false
		}
		if err == nil && a.status != http.StatusTooManyRequests && a.status != http.StatusServiceUnavailable {
			return a, p, true
		}
		if errors.Is(b.ctx.Err(), context.DeadlineExceeded) {
			b.t.Errorf("%s: no final answer before the sale's deadline (last: %d, %v)", user, a.status, err)
			return a, p, false
		}
		if b.ctx.Err() != nil { // the test ended the sale: it says why
			return a, p, false
		}
		// A client's pause before it asks again, as a buyer's: not a wait for an event.
		time.Sleep(2*time.Millisecond + rand.N(8*time.Millisecond))
	}
}

// answer is the answer to one order request: its status, the order a 201 or a 202 carries,
// and the body as it came.
type answer struct {
	status int
	order  stock.Order
	body   string
}

// failed reports a server error — a 500 or any 5xx but 503 (unavailable: retried with the same
// Idempotency-Key) — as the failure of the test it is, with its body: never an answer to count,
// nor one to try again.
func failed(t *testing.T, who string, a answer) bool {
	t.Helper()
	if a.status < 500 || a.status == http.StatusServiceUnavailable {
		return false
	}
	t.Errorf("%s: answered %d: %s", who, a.status, a.body)
	return true
}

// postOrder places one order over HTTP. The Idempotency-Key makes a retry after a lost answer
// safe: it would return the original order, never a second one.
func postOrder(ctx context.Context, client *http.Client, url, sku, user, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/products/"+sku+"/orders", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", sku+"/"+user)
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	var order struct {
		OrderID string `json:"order_id"`
		UserID  string `json:"user_id"`
	}
	if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(raw, &order); err != nil {
			return answer{}, err
		}
	}
	return answer{status: resp.StatusCode, order: stock.Order{OrderID: order.OrderID, UserID: order.UserID}, body: string(raw)}, nil
}
