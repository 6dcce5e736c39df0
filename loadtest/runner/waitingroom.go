package runner

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/door"
	"github.com/flashsale/seckill/loadtest/verify"
)

// doorRow is what the waiting-room row reports beside the same crowd with no door.
type doorRow struct {
	door.Summary
	admitPerS int
	cpu       string
	wall      time.Duration
}

// noDoorRow is the same crowd ordering a product without a waiting room.
type noDoorRow struct {
	orders, busy, requests int
	p50, p99               time.Duration
	cpu                    string
	wall                   time.Duration
}

// runWaitingRoom is the -waiting-room row: on processes started with buyer identity on, a crowd
// of -users buyers joins a waiting room that admits o.waitingRoom a second, polls as it is told,
// and orders with its pass; then the same crowd orders a product with no door. Both sales are
// verified, and no order may be placed without a pass.
func runWaitingRoom(ctx context.Context, o options, bin, dir string, db *sql.DB, prov string, stdout, stderr io.Writer) error {
	crowd, err := door.NewBuyers(ctx, dir, o.sku, o.users)
	if err != nil {
		return err
	}
	p := &pass{label: "waiting room", suffix: "-door",
		env: []string{"SECKILL_BUYER_JWKS=" + crowd.JWKS, "SECKILL_BUYER_AUDIENCE=" + door.Audience}}
	if o.strategy != "" {
		p.env = append(p.env, "SECKILL_STRATEGY="+o.strategy)
	}
	targets, pids, err := p.start(ctx, o, bin, dir, stderr)
	if err != nil {
		return err
	}
	defer p.stop()
	store, err := p.store(ctx, db, stderr)
	if err != nil {
		return err
	}
	if store != nil {
		defer store.Close()
	}
	transport := &http.Transport{MaxIdleConns: o.concurrency, MaxIdleConnsPerHost: o.concurrency}
	defer transport.CloseIdleConnections()
	client := &http.Client{Timeout: o.timeout, Transport: transport}
	dc := door.NewClient(client, targets, o.concurrency)
	vf := verify.Verifier{Client: client, Base: targets[0], Token: o.token, Store: store, BuyerToken: crowd.Token}
	meter := cpu.NewMeter(append([]cpu.Group{cpu.Services(targets, pids)},
		cpu.Backends(cpu.Run{MySQL: o.mysql, Redis: o.redis, NATS: o.nats, Spawned: true})...)...)

	doorSKU, openSKU := o.sku+"-door", o.sku+"-nodoor"
	room := fmt.Sprintf(`{"name":"load test","stock":%d,"max_per_order":1,"waiting_room":{"admit_per_s":%d,"pass_ttl_s":120}}`, o.stock, o.waitingRoom)
	if err := adminPut(ctx, client, targets[0], o.token, doorSKU, room); err != nil {
		return err
	}
	if err := putProduct(ctx, client, targets[0], o.token, openSKU, o.stock, 0); err != nil {
		return err
	}
	var failed []string

	// No order without a pass: a buyer of the crowd, on every instance, before the sale.
	for i := range targets {
		a, err := dc.Do(ctx, i, door.Request{Method: http.MethodPost, Path: "/api/v1/products/" + doorSKU + "/orders", Token: crowd.Tokens[0], Body: "{}"})
		if err != nil {
			return err
		}
		if a.Status != http.StatusForbidden || a.Code != "pass_required" {
			failed = append(failed, fmt.Sprintf("an order without a pass on %s was answered %d %s, not 403 pass_required", a.Target, a.Status, a.Code))
		}
	}

	saleCtx, cancel := context.WithTimeout(ctx, o.duration)
	rec := meter.Start()
	start := time.Now()
	visits := make([]door.Visit, o.users)
	var wg sync.WaitGroup
	for i := range o.users {
		wg.Go(func() { visits[i] = door.Walk(saleCtx, dc, i, doorSKU, crowd.Tokens[i], o.retryRounds) })
	}
	wg.Wait()
	timedOut := saleCtx.Err() != nil
	cancel()
	row := doorRow{Summary: door.Summarize(visits), admitPerS: o.waitingRoom, wall: time.Since(start)}
	row.cpu = cpuText(meter, rec, start, row.Orders)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if timedOut {
		failed = append(failed, fmt.Sprintf("waiting room: the crowd was not through the door within -duration %s", o.duration))
	}
	var acked []verify.Order
	for _, v := range visits {
		if v.Order != nil {
			acked = append(acked, *v.Order)
		}
		if v.Ended != "" && v.Ended != "sold_out" {
			failed = append(failed, "waiting room: a buyer "+v.Ended)
		}
	}
	failed = append(failed, verified(ctx, vf, doorSKU, acked)...)

	// The same crowd at a product with no door.
	saleCtx, cancel = context.WithTimeout(ctx, o.duration)
	start = time.Now()
	var (
		mu     sync.Mutex
		plain  noDoorRow
		took   []time.Duration
		placed []verify.Order
	)
	for i := range o.users {
		wg.Go(func() {
			for try := 0; ; try++ {
				a, err := dc.Do(saleCtx, i, door.Request{Method: http.MethodPost, Path: "/api/v1/products/" + openSKU + "/orders", Token: crowd.Tokens[i], Body: "{}"})
				mu.Lock()
				if err != nil {
					mu.Unlock()
					return
				}
				plain.requests++
				took = append(took, a.Took)
				switch {
				case a.Status == http.StatusCreated:
					placed = append(placed, door.OrderOf(a.Body))
				case a.Code == "busy":
					plain.busy++
				}
				mu.Unlock()
				if a.Code != "busy" || try >= o.retryRounds {
					return
				}
				select {
				case <-time.After(max(a.RetryAfter, 100*time.Millisecond)):
				case <-saleCtx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	rec.Stop()
	plain.wall, plain.orders = time.Since(start), len(placed)
	plain.p50, plain.p99 = door.Quantile(took, 0.5), door.Quantile(took, 0.99)
	plain.cpu = cpuText(meter, rec, start, plain.orders)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	failed = append(failed, verified(ctx, vf, openSKU, placed)...)

	fmt.Fprintf(stdout, "\n%s\n\n%d units, %d buyers with signed tokens, at most %d requests in flight, against %d service process(es) started by the tool (%s); "+
		"waiting room admitting %d/s, then the same crowd at a product with no door. Each sale verified: the invariant, every 201 backed by its order, and no order but those answered 201 to a buyer with its pass.\n\n",
		prov, o.stock, o.users, o.concurrency, o.spawn, backendsText(o), o.waitingRoom)
	writeDoorTable(stdout, row, plain)
	if len(failed) > 0 {
		return fmt.Errorf("verification failed:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// writeDoorTable prints the row beside the crowd with no door.
func writeDoorTable(w io.Writer, d doorRow, n noDoorRow) {
	ms := func(x time.Duration) string { return strconv.FormatInt(x.Milliseconds(), 10) }
	fmt.Fprintln(w, "| sale | orders | admission /s (configured) | admission order vs join order: places off p50 / p99 / max | join → pass p50 / p99 ms | pass → order p50 / p99 ms | busy answers | order p50 / p99 ms | wall s | CPU |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	fmt.Fprintf(w, "| waiting room | %d (%d admitted, %d sent home sold out) | %.0f (%d) | %d / %d / %d | %s / %s | %s / %s | %d | — | %.1f | %s |\n",
		d.Orders, d.Admitted, d.SoldOutInLine, d.Rate, d.admitPerS, d.StrayP50, d.StrayP99, d.StrayMax,
		ms(d.JoinToPass[0]), ms(d.JoinToPass[1]), ms(d.PassToOrder[0]), ms(d.PassToOrder[1]), d.Busy, d.wall.Seconds(), d.cpu)
	fmt.Fprintf(w, "| no door | %d | — | — | — | — | %d of %d requests | %s / %s | %.1f | %s |\n",
		n.orders, n.busy, n.requests, ms(n.p50), ms(n.p99), n.wall.Seconds(), n.cpu)
	fmt.Fprintln(w, "\nThe admission rate is the places the waiting buyers' positions fell, over the seconds they waited, pooled. "+
		"A buyer's admission is the midpoint between its last waiting poll and the poll that had its pass, so its order and join → pass carry the polls' spacing (poll_after_ms).")
}

// cpuText is each measured group's CPU seconds from start to now (the recording's last sample).
func cpuText(m *cpu.Meter, rec *cpu.Recording, start time.Time, orders int) string {
	ph := m.Phase(rec.Between(start, time.Now()), orders)
	var parts []string
	for _, g := range ph.Groups {
		if g.Seconds != nil {
			parts = append(parts, fmt.Sprintf("%s %.1f s", g.Group, *g.Seconds))
		}
	}
	return strings.Join(parts, ", ")
}

// verified is what the verifier found wrong with the sale of sku.
func verified(ctx context.Context, vf verify.Verifier, sku string, acked []verify.Order) []string {
	v, err := vf.Verify(ctx, sku, acked)
	if err != nil {
		return []string{sku + ": verify: " + err.Error()}
	}
	var out []string
	for _, p := range v.Problems {
		out = append(out, sku+": "+p)
	}
	if v.Audit.Orders != int64(len(acked)) {
		out = append(out, fmt.Sprintf("%s: %d orders stored, %d answered 201 to a buyer with its pass", sku, v.Audit.Orders, len(acked)))
	}
	return out
}

// adminPut PUTs a product's body as the admin.
func adminPut(ctx context.Context, client *http.Client, base, token, sku, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/api/v1/products/"+sku, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT product %s: %d %s", sku, resp.StatusCode, raw)
	}
	return nil
}

var errNoWaitingRoomTarget = errors.New("-waiting-room starts processes with buyer identity on (a key it signs buyer tokens with): leave out -target")
