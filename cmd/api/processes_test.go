package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// buildService compiles cmd/api once for the test.
func buildService(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "seckill")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// startProcess starts the service binary as a child process on the test database and waits
// until it listens. It is stopped with SIGTERM in t.Cleanup, and must exit cleanly.
func startProcess(t *testing.T, bin string, extraEnv ...string) service {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), backendtest.Env(t)...),
		append([]string{"SECKILL_ADDR=127.0.0.1:0", "SECKILL_ADMIN_TOKEN=process-test", "SECKILL_LOG_FORMAT=json",
			"SECKILL_DB_MAX_CONNS=10"}, extraEnv...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			assert.NoError(t, err, "the service exits cleanly on SIGTERM; stderr:\n%s", stderr.String())
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the service did not stop 30s after SIGTERM")
		}
	})
	select {
	case svc := <-watchOutput(t, stdout):
		svc.token = "process-test"
		return svc
	case err := <-exited:
		t.Fatalf("the service exited at start: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the service did not listen within 60s\n%s", stderr.String())
	}
	return service{}
}

// TestProcesses runs the sale across three service processes on one database, over HTTP, for
// every safe strategy: exactly the stock is sold, the invariant holds in SQL, and every 201 has
// its order row. It logs each strategy's orders/s.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and runs three processes; skipped with -short")
	}
	bin := buildService(t)
	var procs []service
	for range 3 {
		procs = append(procs, startProcess(t, bin))
	}
	const (
		units   = 100
		buyers  = 300
		clients = 48
	)
	for _, strategy := range []string{"pessimistic", "dblock"} {
		t.Run(strategy, func(t *testing.T) {
			sku := backendtest.SKU(t)
			require.Equal(t, http.StatusOK, procs[0].call(t, "PUT", "/api/v1/products/"+sku,
				fmt.Sprintf(`{"name":"process test","stock":%d}`, units), nil))
			res := loadHTTP(t, procs, sku, strategy, buyers, clients)
			soldIn := res.lastSale.Sub(res.start)
			t.Logf("%s, 3 processes, %d clients: %d orders in %s = %.0f orders/s; %d sold_out, %d busy retries, %s total",
				strategy, clients, len(res.acked), soldIn.Round(time.Millisecond), float64(len(res.acked))/soldIn.Seconds(),
				res.status[http.StatusConflict], res.busy, res.end.Sub(res.start).Round(time.Millisecond))
			assert.Equal(t, map[int]int{http.StatusCreated: units, http.StatusConflict: buyers - units}, res.status)
			backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
		})
	}
}

// httpSale is what the clients of one HTTP sale saw.
type httpSale struct {
	status          map[int]int
	acked           []stock.Order
	busy            int
	start, lastSale time.Time
	end             time.Time
}

// loadHTTP has clients concurrent clients buy one unit each for buyers users, round-robin over
// the processes. A 429 is retried after a short jittered pause, bounded by a deadline.
func loadHTTP(t *testing.T, procs []service, sku, strategy string, buyers, clients int) httpSale {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	users := make(chan int)
	go func() {
		defer close(users)
		for i := range buyers {
			users <- i
		}
	}()
	res := httpSale{status: map[int]int{}, start: time.Now()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range users {
				user := fmt.Sprintf("user-%04d", i)
				body := fmt.Sprintf(`{"user_id":%q,"strategy":%q}`, user, strategy)
				for attempt := 0; ; attempt++ {
					status, order, err := postOrder(ctx, client, procs[(i+attempt)%len(procs)].url, sku, user, body)
					if err != nil {
						t.Errorf("%s: %v", user, err)
						return
					}
					mu.Lock()
					if status == http.StatusTooManyRequests {
						res.busy++
						mu.Unlock()
						time.Sleep(time.Millisecond + rand.N(5*time.Millisecond))
						continue
					}
					res.status[status]++
					if status == http.StatusCreated {
						res.acked = append(res.acked, order)
						res.lastSale = time.Now()
					}
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	res.end = time.Now()
	return res
}

// postOrder places one order over HTTP. The Idempotency-Key makes a retry after a lost answer
// safe: it would return the original order, never a second one.
func postOrder(ctx context.Context, client *http.Client, url, sku, user, body string) (int, stock.Order, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/products/"+sku+"/orders", strings.NewReader(body))
	if err != nil {
		return 0, stock.Order{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", sku+"/"+user)
	resp, err := client.Do(req)
	if err != nil {
		return 0, stock.Order{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, stock.Order{}, err
	}
	var order struct {
		OrderID string `json:"order_id"`
		UserID  string `json:"user_id"`
	}
	if resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(raw, &order); err != nil {
			return 0, stock.Order{}, err
		}
	}
	return resp.StatusCode, stock.Order{OrderID: order.OrderID, UserID: order.UserID}, nil
}
