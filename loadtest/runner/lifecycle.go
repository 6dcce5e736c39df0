package runner

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/verify"
)

// afterSale is what the buyers do with their orders once the first round is over (-cancel,
// -unpaid): a share cancel, a share never pay — their orders expire when the payment timeout
// runs out — and the rest pay. The units of the cancelled and expired orders must come back on
// sale by themselves; a second round of fresh buyers then buys them, and the verifier checks
// that every order is in the state its buyer's choice leads to and that each unit came back
// once.
type afterSale struct {
	cancel, unpaid float64       // shares of the orders, 0 to 1 together
	timeout        time.Duration // the products' payment timeout (whole seconds)
}

// on reports whether the run does anything after the sale.
func (a afterSale) on() bool { return a.cancel > 0 || a.unpaid > 0 }

// fate is what the buyer of an order does with it, decided by its id so that runs repeat.
func (a afterSale) fate(orderID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(orderID))
	switch x := float64(h.Sum32()%10000) / 10000; {
	case x < a.cancel:
		return "cancelled"
	case x < a.cancel+a.unpaid:
		return "expired"
	}
	return "confirmed"
}

// act pays or cancels each order as its fate says (with workers requests at a time, round-robin
// over the targets) and returns the orders with the state they must end in. An answer other
// than 200 is a problem: the buyer acted in time, so the service must agree.
func (a afterSale) act(ctx context.Context, client *http.Client, targets []string, acked []verify.Order, payAll bool,
	workers int) ([]verify.Order, report.Lifecycle) {
	out := make([]verify.Order, len(acked))
	var (
		mu  sync.Mutex
		rep report.Lifecycle
		wg  sync.WaitGroup
	)
	jobs := make(chan int)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				o := acked[i]
				o.Want = "confirmed"
				if !payAll {
					o.Want = a.fate(o.OrderID)
				}
				action := map[string]string{"confirmed": "pay", "cancelled": "cancel"}[o.Want]
				var problem string
				if action != "" && (a.timeout > 0 || action == "cancel") {
					url := fmt.Sprintf("%s/api/v1/orders/%s/%s", targets[(w+i)%len(targets)], o.OrderID, action)
					problem = post(ctx, client, url, fmt.Sprintf(`{"user_id":%q}`, o.UserID))
				}
				mu.Lock()
				out[i] = o
				switch {
				case problem != "":
					rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s: %s", action, o.OrderID, problem))
				case o.Want == "cancelled":
					rep.Cancelled++
				case o.Want == "expired":
					rep.Unpaid++
				default:
					rep.Paid++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range acked {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return out, rep
}

// post sends one pay or cancel and says what was wrong with its answer ("" for a 200).
func post(ctx context.Context, client *http.Client, url, body string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return ""
}

// awaitNoPending polls the audit until no order of sku is pending — the unpaid ones expired and
// their units are back — or the payment timeout and the contract's 5 s have passed.
func (a afterSale) awaitNoPending(ctx context.Context, vf verify.Verifier, sku string) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(a.timeout + 5*time.Second)
	for {
		var au contract.Audit
		if err := vf.Get(ctx, "/api/v1/products/"+sku+"/audit", &au); err != nil {
			return 0, err
		}
		if au.Pending == 0 {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("%d orders of %s still pending %s after the payments: expiry did not happen in time",
				au.Pending, sku, time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
