package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/stock"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/door"
	"github.com/flashsale/seckill/quantile"
)

// waitingRoom is the herd at the hot row, with and without a door. The whole crowd at once meets
// one product row whose section costs a few milliseconds, one order a section: the orders queue
// in the instance for the row, and the last of them waits for every sale before it. The same
// crowd through a waiting room that lets buyers in at half the rate the row served the herd
// meets the row a few at a time, and each order waits about its own section. A form fails when
// its p99 order waited longer than half the units' sections take — a buyer stood in line for the
// crowd. Both forms run through the HTTP API of one instance, as buyers would.
func waitingRoom() Experiment {
	return Experiment{
		Name:  "waiting-room",
		Seed:  "the front door of a flash sale, as AWS's virtual waiting room, Cloudflare Waiting Room and Shopify's checkout queue build it: let the crowd in at a rate the back end can serve",
		Claim: "The whole crowd at once at one hot row makes its orders wait in line for the row, the last for every sale before it; let in at a rate the row can serve, each order waits about its own section.",
		Fix:   `PUT /api/v1/products/{sku} {"waiting_room": {"admit_per_s": N}}: join, poll as poll_after_ms says, order with the Seckill-Pass`,
		Run:   runWaitingRoom,
	}
}

// doorRun is what one form's crowd heard, and what it cost the database.
type doorRun struct {
	placed, soldOut, busy, other int
	p50, p99                     time.Duration // of the orders
	wall                         time.Duration
	databaseCPU                  string
}

func (r doorRun) String() string {
	return fmt.Sprintf("%d placed, %d sold out, %d busy, %d other; orders p50 %s, p99 %s; %s in all; database CPU %s",
		r.placed, r.soldOut, r.busy, r.other, ms(r.p50), ms(r.p99), r.wall.Round(time.Millisecond), r.databaseCPU)
}

// databaseCPU is the database server's CPU seconds over u, or why it was not measured.
func databaseCPU(m *cpu.Meter, u cpu.Use) string {
	g := m.Phase(u, 0).Groups[0]
	if g.Seconds == nil {
		return "not measured (" + g.NA + ")"
	}
	return fmt.Sprintf("%.2f s", *g.Seconds)
}

func runWaitingRoom(ctx context.Context, env *Env) (Result, error) {
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	buyers, units := pick(env.Size, 300, 2000), pick(env.Size, 100, 500)
	// The row's section: one order at a time (no group commit), a few milliseconds of work with
	// the row locked: at most 1/hold orders a second, fewer by the commit's own cost.
	hold := 10 * time.Millisecond
	cfg := labConfig("pessimistic")
	cfg.GroupCommit = 1
	cfg.Hooks.InSection = func(ctx context.Context, _ []stock.OrderRequest) { sleep(ctx, hold) }
	// Buyer identity on, as a deployment runs a door: a key of the run's own, a token a buyer.
	dir, err := os.MkdirTemp("", "seckill-lab-buyers-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	signed, err := door.NewBuyers(ctx, dir, env.key("waiting-room", "buyer"), buyers)
	if err != nil {
		return Result{}, err
	}
	c := env.config(cfg)
	c.Buyers.JWKS, c.Buyers.Audience = signed.JWKS, door.Audience
	inst, err := env.newInstance(ctx, c)
	if err != nil {
		return Result{}, err
	}
	defer inst.close()
	srv := httptest.NewServer(inst.app.Handler())
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: buyers}}

	herdSKU, doorSKU := env.key("waiting-room", "herd"), env.key("waiting-room", "door")
	defer deleteProducts(ctx, env, []string{herdSKU, doorSKU})
	if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: herdSKU, Name: "no door", Stock: int64(units), MaxPerOrder: 1}); err != nil {
		return Result{}, err
	}

	// The database's CPU in each form: the herd's waits are the row's, the door's are Redis's.
	meter := cpu.NewMeter(cpu.Backends(cpu.Run{MySQL: env.base.MySQLDSN})[0])
	rec := meter.Start()
	defer rec.Stop()
	begun := time.Now()
	herd, err := crowd(ctx, buyers, func(ctx context.Context, i int) (int, string, time.Duration, error) {
		return labOrder(ctx, client, srv.URL, herdSKU, signed.Tokens[i], "")
	})
	if err != nil {
		return Result{}, err
	}
	herd.databaseCPU = databaseCPU(meter, rec.Between(begun, time.Now()))
	// The room lets in half what the row served the herd just now: the row's pace is the
	// machine's (a commit's fsync, the CPU's other work), and a fixed rate would overrun a
	// loaded machine's slower row and put the crowd back in line at it.
	admit := max(1, int(float64(herd.placed)/herd.wall.Seconds()/2))
	if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: doorSKU, Name: "a waiting room", Stock: int64(units), MaxPerOrder: 1,
		WaitingRoom: &stock.WaitingRoom{AdmitPerS: admit, PassTTL: 2 * time.Minute}}); err != nil {
		return Result{}, err
	}
	begun = time.Now()
	room, err := crowd(ctx, buyers, func(ctx context.Context, i int) (int, string, time.Duration, error) {
		pass, soldOut, err := admitted(ctx, client, srv.URL, doorSKU, signed.Tokens[i])
		if err != nil || soldOut {
			return http.StatusConflict, "sold_out", 0, err
		}
		return labOrder(ctx, client, srv.URL, doorSKU, signed.Tokens[i], pass)
	})
	if err != nil {
		return Result{}, err
	}
	room.databaseCPU = databaseCPU(meter, rec.Between(begun, time.Now()))
	// In line for the crowd: the p99 order waited longer than half the units' sections.
	inLine := time.Duration(units/2) * hold
	form := fmt.Sprintf("%d buyers at once for %d units, one row, %s a section", buyers, units, hold)
	return Result{
		Failing: Outcome{Form: "no door: " + form, Happened: herd.String(), Failed: herd.p99 > inLine},
		Fixed: Outcome{Form: fmt.Sprintf("a waiting room admitting %d/s (half what the row served the herd): %s", admit, form), Happened: room.String(),
			Failed: room.p99 > inLine || room.busy > 0 || room.placed != units},
		Chart: Chart{Title: fmt.Sprintf("p99 of the orders of %d buyers for %d units at one hot row (in line for the crowd from %s)", buyers, units, ms(inLine)), Unit: "ms", Bars: []Bar{
			{Label: "no door", Value: float64(herd.p99.Microseconds()) / 1000, Failed: herd.p99 > inLine},
			{Label: fmt.Sprintf("waiting room, %d/s", admit), Value: float64(room.p99.Microseconds()) / 1000, Failed: room.p99 > inLine},
		}},
	}, nil
}

// crowd runs one buyer's order for each of n buyers, released together, and counts the answers.
func crowd(ctx context.Context, n int, buy func(ctx context.Context, i int) (int, string, time.Duration, error)) (doorRun, error) {
	var (
		mu    sync.Mutex
		r     doorRun
		took  []time.Duration
		first error
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			status, code, d, err := buy(ctx, i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				first = cmpOr(first, err)
			case status == http.StatusCreated:
				r.placed++
			case code == "sold_out":
				r.soldOut++
			case code == "busy":
				r.busy++
			default:
				r.other++
			}
			if d > 0 {
				took = append(took, d)
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	r.wall = time.Since(began)
	r.p50, r.p99 = quantile.Of(took, 0.5), quantile.Of(took, 0.99)
	return r, first
}

// cmpOr is a unless it is nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// admitted joins sku's waiting room as the buyer of token and polls as it is told until the pass
// comes, or the sale ends the wait (soldOut).
func admitted(ctx context.Context, client *http.Client, base, sku, token string) (pass string, soldOut bool, err error) {
	status, body, loc, err := labCall(ctx, client, http.MethodPost, base+"/api/v1/products/"+sku+"/queue", token, "")
	for err == nil {
		switch {
		case status == http.StatusConflict:
			return "", true, nil
		case status != http.StatusOK && status != http.StatusAccepted:
			return "", false, fmt.Errorf("waiting room of %s: %d %v", sku, status, body)
		case body["admitted"] == true:
			pass, _ = body["pass"].(string)
			return pass, false, nil
		}
		wait, _ := body["poll_after_ms"].(float64)
		sleep(ctx, time.Duration(wait)*time.Millisecond)
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		if loc == "" {
			return "", false, fmt.Errorf("waiting room of %s: a join with no Location", sku)
		}
		status, body, _, err = labCall(ctx, client, http.MethodGet, base+loc, token, "")
	}
	return "", false, err
}

// labOrder places the order of sku of the buyer of token, with its pass when it has one: the
// status, the error's code and how long the order took.
func labOrder(ctx context.Context, client *http.Client, base, sku, token, pass string) (int, string, time.Duration, error) {
	start := time.Now()
	status, body, _, err := labCall(ctx, client, http.MethodPost, base+"/api/v1/products/"+sku+"/orders", token, pass)
	took := time.Since(start)
	code := ""
	if e, ok := body["error"].(map[string]any); ok {
		code, _ = e["code"].(string)
	}
	if status >= 500 {
		return status, code, took, fmt.Errorf("order of %s: %d %s", sku, status, code)
	}
	return status, code, took, err
}

// labCall sends one buyer request of the API, as the buyer of token, and decodes its JSON answer.
// A POST carries an empty object: the buyer is the token's.
func labCall(ctx context.Context, client *http.Client, method, url, token, pass string) (int, map[string]any, string, error) {
	var rd io.Reader
	if method == http.MethodPost {
		rd = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if pass != "" {
		req.Header.Set("Seckill-Pass", pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return resp.StatusCode, nil, "", fmt.Errorf("%s %s: %d, not JSON: %w", method, url, resp.StatusCode, err)
	}
	return resp.StatusCode, out, resp.Header.Get("Location"), nil
}
