package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// queuedAnswer is the final answer one buyer of a queued sale heard: 202 (accepted) or 201 (a
// retry that found its order placed), with the order; or 409.
type queuedAnswer struct {
	status int
	order  string
}

// buyQueued has clients buy one unit each for users from..to-1 with the queued strategy, round-
// robin over procs; a 429 is retried, and a lost answer is retried on the next process with the
// same Idempotency-Key. inject runs once, after at accepted orders; until then every request
// goes to procs[only].
func buyQueued(t *testing.T, procs []instance, sku string, from, to, clients, at, only int, inject func()) map[string]queuedAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 30 * time.Second}
	users := make(chan int)
	go func() {
		defer close(users)
		for i := from; i < to; i++ {
			users <- i
		}
	}()
	var (
		mu       sync.Mutex
		answers  = map[string]queuedAnswer{}
		accepted int
		faulted  bool
		wg       sync.WaitGroup
		injected sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for i := range users {
				user := fmt.Sprintf("user-%04d", i)
				for attempt := 0; ctx.Err() == nil; attempt++ {
					target := procs[(i+attempt)%len(procs)]
					mu.Lock()
					if !faulted && only >= 0 {
						target = procs[only]
					}
					mu.Unlock()
					status, id, err := postQueued(ctx, client, target.url, sku, user)
					if err != nil || status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
						time.Sleep(5*time.Millisecond + rand.N(20*time.Millisecond))
						continue
					}
					mu.Lock()
					answers[user] = queuedAnswer{status: status, order: id}
					if status == http.StatusAccepted || status == http.StatusCreated {
						accepted++
						if accepted == at && inject != nil {
							faulted = true
							injected.Go(inject)
						}
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	wg.Wait()
	injected.Wait()
	return answers
}

func postQueued(ctx context.Context, client *http.Client, url, sku, user string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/products/"+sku+"/orders",
		strings.NewReader(fmt.Sprintf(`{"user_id":%q,"strategy":"queued"}`, user)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", sku+"/"+user)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	var o struct {
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(raw, &o)
	return resp.StatusCode, o.OrderID, nil
}

// TestProcessesQueuedWriterKill SIGKILLs one of three queued processes mid-sale, while its
// writers hold batches and its reservations are in flight. Its unacked messages go to the other
// writers after AckWait, its orphaned reservations to the sweepers: every order any client heard
// 202 (or 201) for ends within 10 s of the kill — one active row, or rejected with its unit back
// — and new buyers then buy every unit left.
func TestProcessesQueuedWriterKill(t *testing.T) {
	procs := startThree(t)
	const units, first, clients = 120, 90, 32
	sku := putOnSale(t, procs[0], units)
	var killed time.Time
	answers := buyQueued(t, procs, sku, 0, first, clients, first/3, 1, func() {
		killed = time.Now()
		procs[1].kill()
	})
	live := procs[:1]
	ended := func(id string) (string, bool) {
		var o struct {
			Status string `json:"status"`
		}
		if live[0].call(t, http.MethodGet, "/api/v1/orders/"+id+"?wait=1s", "", &o) != http.StatusOK {
			return "", false
		}
		return o.Status, o.Status != "queued"
	}
	placed, rejected := 0, 0
	var acked []stock.Order
	for user, a := range answers {
		require.Contains(t, []int{http.StatusAccepted, http.StatusCreated}, a.status, "%s: every buyer of the first wave is accepted", user)
		var status string
		require.Eventually(t, func() bool {
			var ok bool
			status, ok = ended(a.order)
			return ok
		}, time.Until(killed.Add(10*time.Second))+5*time.Second, 100*time.Millisecond, "order %s of %s never ended", a.order, user)
		if status == string(stock.Rejected) {
			rejected++
		} else {
			placed++
			acked = append(acked, stock.Order{OrderID: a.order, UserID: user})
		}
	}
	t.Logf("queued, one of 3 processes SIGKILLed mid-sale: %d accepted, %d placed, %d rejected; every 202 ended %s after the kill",
		len(answers), placed, rejected, time.Since(killed).Round(100*time.Millisecond))
	assert.Zero(t, rejected, "the database had stock for every accepted order")

	var audit map[string]any
	require.Eventually(t, func() bool {
		audit = nil
		return live[0].call(t, http.MethodGet, "/api/v1/products/"+sku+"/audit", "", &audit) == http.StatusOK &&
			audit["redis_reservations"] == 0.0 && audit["queued"] == 0.0 && audit["held_back"] == 0.0
	}, 20*time.Second, 100*time.Millisecond, "units still held after the kill: %v", audit)

	rest := buyQueued(t, live, sku, first, first+units, clients, 0, -1, nil)
	var more int
	for user, a := range rest {
		if a.status == http.StatusAccepted {
			more++
			require.Eventually(t, func() bool { _, ok := ended(a.order); return ok }, 10*time.Second, 50*time.Millisecond)
			acked = append(acked, stock.Order{OrderID: a.order, UserID: user})
		}
	}
	assert.Equal(t, units-placed, more, "new buyers bought every unit left")
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, acked)
	assert.Zero(t, a.Stock, "nothing stranded")
}
