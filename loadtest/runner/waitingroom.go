package runner

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/verify"
)

// buyerAudience is the aud of the tokens the tool signs, and the processes' SECKILL_BUYER_AUDIENCE.
const buyerAudience = "seckill-loadtest"

// buyers are the crowd of a waiting-room run: a key of the tool's own, published in a JWKS file
// the processes read (SECKILL_BUYER_JWKS), and a token signed with it for every buyer — an
// authenticated sale, as a deployment runs it.
type buyers struct {
	jwks   string   // the JWKS file
	tokens []string // bearer token of buyer i
	names  map[string]int
}

// newBuyers makes the key, writes its JWKS in dir and signs n tokens, each an hour to live.
func newBuyers(ctx context.Context, dir, prefix string, n int) (*buyers, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	const kid = "loadtest"
	jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
		KID: kid, ALG: jwkset.AlgEdDSA, USE: jwkset.UseSig}})
	if err != nil {
		return nil, err
	}
	store := jwkset.NewMemoryStorage()
	if err := store.KeyWrite(ctx, jwk); err != nil {
		return nil, err
	}
	raw, err := store.JSONPublic(ctx)
	if err != nil {
		return nil, err
	}
	b := &buyers{jwks: filepath.Join(dir, "buyers.jwks.json"), tokens: make([]string, n), names: make(map[string]int, n)}
	if err := os.WriteFile(b.jwks, raw, 0o644); err != nil {
		return nil, err
	}
	exp := time.Now().Add(time.Hour)
	for i := range n {
		sub := fmt.Sprintf("%s-u%06d", prefix, i)
		t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Subject: sub,
			Audience: jwt.ClaimStrings{buyerAudience}, ExpiresAt: jwt.NewNumericDate(exp)})
		t.Header["kid"] = kid
		if b.tokens[i], err = t.SignedString(key); err != nil {
			return nil, err
		}
		b.names[sub] = i
	}
	return b, nil
}

// token is the bearer token of the buyer named user ("" for a name the tool did not sign).
func (b *buyers) token(user string) string {
	if i, ok := b.names[user]; ok {
		return b.tokens[i]
	}
	return ""
}

// doorClient sends the crowd's requests, at most limit in flight, round-robin over the targets.
type doorClient struct {
	client  *http.Client
	targets []string
	sem     chan struct{}
}

// answer is what one request heard.
type answer struct {
	status     int
	code       string // the error's code, for a 4xx or 5xx
	body       map[string]any
	location   string
	retryAfter time.Duration
	took       time.Duration
}

// do sends one request as the buyer whose token it carries, on target i (mod the targets).
func (c *doorClient) do(ctx context.Context, i int, method, path, token, pass, body string) (answer, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return answer{}, ctx.Err()
	}
	defer func() { <-c.sem }()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.targets[i%len(c.targets)]+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if pass != "" {
		req.Header.Set("Seckill-Pass", pass)
	}
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, location: resp.Header.Get("Location"), took: time.Since(start)}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		a.retryAfter = time.Duration(s) * time.Second
	}
	_ = json.Unmarshal(raw, &a.body)
	if e, ok := a.body["error"].(map[string]any); ok {
		a.code, _ = e["code"].(string)
	}
	return a, nil
}

// visit is one buyer's way through the door: when it joined, when its pass came (the moment
// between the poll that still waited and the one that had it), when its order was answered.
type visit struct {
	joined, admitted, ordered time.Time
	admittedBy                time.Duration // how long before admitted the previous poll was answered
	order                     *verify.Order
	status                    int    // the order's last answer
	code                      string // its error code
	busy                      int    // 429 busy answers on the way
	ended                     string // why the buyer went home without an order, if it did
	// The first and last position the buyer heard while it waited, and when: the line moved
	// first-last places meanwhile, the server's own count of buyers let in ahead of it.
	firstPos, lastPos int64
	firstAt, lastAt   time.Time
}

// heard notes a waiting answer's position.
func (v *visit) heard(body map[string]any, at time.Time) {
	p, ok := body["position"].(float64)
	if !ok {
		return
	}
	if v.firstAt.IsZero() {
		v.firstPos, v.firstAt = int64(p), at
	}
	v.lastPos, v.lastAt = int64(p), at
}

// doorRow is what the waiting-room row reports beside the same crowd with no door.
type doorRow struct {
	admitPerS          int
	admitted, orders   int
	soldOutInLine      int
	rate               float64 // admissions a second, as the waiting buyers' positions fell
	strayP50, strayP99 int     // |place in join order - place in admission order|
	strayMax           int
	joinToPass         [2]time.Duration // p50, p99
	passToOrder        [2]time.Duration
	busy               int
	cpu                string
	wall               time.Duration
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
	crowd, err := newBuyers(ctx, dir, o.sku, o.users)
	if err != nil {
		return err
	}
	p := &pass{label: "waiting room", suffix: "-door",
		env: []string{"SECKILL_BUYER_JWKS=" + crowd.jwks, "SECKILL_BUYER_AUDIENCE=" + buyerAudience}}
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
	dc := &doorClient{client: client, targets: targets, sem: make(chan struct{}, o.concurrency)}
	vf := verify.Verifier{Client: client, Base: targets[0], Token: o.token, Store: store, BuyerToken: crowd.token}
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
		a, err := dc.do(ctx, i, http.MethodPost, "/api/v1/products/"+doorSKU+"/orders", crowd.tokens[0], "", "{}")
		if err != nil {
			return err
		}
		if a.status != http.StatusForbidden || a.code != "pass_required" {
			failed = append(failed, fmt.Sprintf("an order without a pass on %s was answered %d %s, not 403 pass_required", targets[i], a.status, a.code))
		}
	}

	saleCtx, cancel := context.WithTimeout(ctx, o.duration)
	rec := meter.Start()
	start := time.Now()
	visits := make([]visit, o.users)
	var wg sync.WaitGroup
	for i := range o.users {
		wg.Go(func() { visits[i] = walkThrough(saleCtx, dc, i, doorSKU, crowd.tokens[i], o.retryRounds) })
	}
	wg.Wait()
	timedOut := saleCtx.Err() != nil
	cancel()
	door := summarizeDoor(visits, o.waitingRoom)
	door.wall = time.Since(start)
	door.cpu = cpuText(meter, rec, start, door.orders)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if timedOut {
		failed = append(failed, fmt.Sprintf("waiting room: the crowd was not through the door within -duration %s", o.duration))
	}
	var acked []verify.Order
	for _, v := range visits {
		if v.order != nil {
			acked = append(acked, *v.order)
		}
		if v.ended != "" && v.ended != "sold_out" {
			failed = append(failed, "waiting room: a buyer "+v.ended)
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
				a, err := dc.do(saleCtx, i, http.MethodPost, "/api/v1/products/"+openSKU+"/orders", crowd.tokens[i], "", "{}")
				mu.Lock()
				if err != nil {
					mu.Unlock()
					return
				}
				plain.requests++
				took = append(took, a.took)
				switch {
				case a.status == http.StatusCreated:
					placed = append(placed, orderOf(a.body))
				case a.code == "busy":
					plain.busy++
				}
				mu.Unlock()
				if a.code != "busy" || try >= o.retryRounds {
					return
				}
				select {
				case <-time.After(max(a.retryAfter, 100*time.Millisecond)):
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
	plain.p50, plain.p99 = quantile(took, 0.5), quantile(took, 0.99)
	plain.cpu = cpuText(meter, rec, start, plain.orders)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	failed = append(failed, verified(ctx, vf, openSKU, placed)...)

	fmt.Fprintf(stdout, "\n%s\n\n%d units, %d buyers with signed tokens, at most %d requests in flight, against %d service process(es) started by the tool (%s); "+
		"waiting room admitting %d/s, then the same crowd at a product with no door. Each sale verified: the invariant, every 201 backed by its order, and no order but those answered 201 to a buyer with its pass.\n\n",
		prov, o.stock, o.users, o.concurrency, o.spawn, backendsText(o), o.waitingRoom)
	writeDoorTable(stdout, door, plain)
	if len(failed) > 0 {
		return fmt.Errorf("verification failed:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}

// walkThrough is buyer i's way through the door: join, poll as poll_after_ms says until the pass
// comes (or the sale ends the wait), then order with the pass, retrying busy answers.
func walkThrough(ctx context.Context, dc *doorClient, i int, sku, token string, retries int) visit {
	var v visit
	a, err := dc.do(ctx, i, http.MethodPost, "/api/v1/products/"+sku+"/queue", token, "", "{}")
	switch {
	case err != nil:
		v.ended = "could not join: " + err.Error()
		return v
	case a.status == http.StatusConflict && a.code == "sold_out":
		v.ended = "sold_out"
		return v
	case a.status != http.StatusAccepted || a.location == "":
		v.ended = fmt.Sprintf("joined and heard %d %s", a.status, a.code)
		return v
	}
	v.joined = time.Now()
	v.heard(a.body, v.joined)
	loc, last := a.location, v.joined
	var pass string
	for n := 0; pass == ""; n++ {
		wait := time.Duration(number(a.body["poll_after_ms"])) * time.Millisecond
		select {
		case <-time.After(max(wait, 10*time.Millisecond)):
		case <-ctx.Done():
			v.ended = "was still waiting when the run's time was up"
			return v
		}
		if a, err = dc.do(ctx, n, http.MethodGet, loc, token, "", ""); err != nil {
			v.ended = "could not poll: " + err.Error()
			return v
		}
		switch {
		case a.status == http.StatusConflict && a.code == "sold_out":
			v.ended = "sold_out"
			return v
		case a.status != http.StatusOK:
			v.ended = fmt.Sprintf("polled and heard %d %s", a.status, a.code)
			return v
		case a.body["admitted"] == true:
			pass, _ = a.body["pass"].(string)
			if pass == "" {
				v.ended = "was admitted with no pass"
				return v
			}
			now := time.Now()
			v.admittedBy = now.Sub(last)
			v.admitted = now.Add(-v.admittedBy / 2)
		default:
			last = time.Now()
			v.heard(a.body, last)
		}
	}
	for try := 0; ; try++ {
		if a, err = dc.do(ctx, i, http.MethodPost, "/api/v1/products/"+sku+"/orders", token, pass, "{}"); err != nil {
			v.ended = "could not order: " + err.Error()
			return v
		}
		v.ordered, v.status, v.code = time.Now(), a.status, a.code
		switch {
		case a.status == http.StatusCreated:
			o := orderOf(a.body)
			v.order = &o
			return v
		case a.code == "busy" && try < retries:
			v.busy++
			select {
			case <-time.After(max(a.retryAfter, 100*time.Millisecond)):
			case <-ctx.Done():
				return v
			}
		case a.code == "busy":
			v.busy++
			return v
		case a.code == "sold_out":
			return v
		default:
			v.ended = fmt.Sprintf("ordered with its pass and heard %d %s", a.status, a.code)
			return v
		}
	}
}

// summarizeDoor reads the visits: the admission rate, how far admission strays from join order,
// and the waits.
func summarizeDoor(visits []visit, admitPerS int) doorRow {
	r := doorRow{admitPerS: admitPerS}
	var in []int // the buyers admitted
	var joinToPass, passToOrder []time.Duration
	for i, v := range visits {
		switch {
		case !v.admitted.IsZero():
			in = append(in, i)
			joinToPass = append(joinToPass, v.admitted.Add(v.admittedBy/2).Sub(v.joined))
			if !v.ordered.IsZero() {
				passToOrder = append(passToOrder, v.ordered.Sub(v.admitted.Add(v.admittedBy/2)))
			}
		case v.ended == "sold_out":
			r.soldOutInLine++
		}
		if v.order != nil {
			r.orders++
		}
		r.busy += v.busy
	}
	r.admitted = len(in)
	// The rate is read from the positions the server answered, not from when passes were seen:
	// a poll that waited its turn in a busy client or server says late that a buyer was let in,
	// and those delays, longest at the start, would squeeze the admissions into less time than
	// they took. Between its first and last waiting answer the line moved first-last places in
	// front of a buyer; pooled over every buyer, places over seconds is the serving counter's
	// rate, and the answers' own delays weigh only at each buyer's two ends.
	var places int64
	var waited time.Duration
	for _, v := range visits {
		if v.lastAt.After(v.firstAt) {
			places += v.firstPos - v.lastPos
			waited += v.lastAt.Sub(v.firstAt)
		}
	}
	if waited > 0 {
		r.rate = float64(places) / waited.Seconds()
	}
	r.joinToPass = [2]time.Duration{quantile(joinToPass, 0.5), quantile(joinToPass, 0.99)}
	r.passToOrder = [2]time.Duration{quantile(passToOrder, 0.5), quantile(passToOrder, 0.99)}
	if len(in) < 2 {
		return r
	}
	byAdmission := slices.Clone(in)
	slices.SortFunc(byAdmission, func(a, b int) int { return visits[a].admitted.Compare(visits[b].admitted) })
	byJoin := slices.Clone(in)
	slices.SortFunc(byJoin, func(a, b int) int { return visits[a].joined.Compare(visits[b].joined) })
	place := make(map[int]int, len(byJoin))
	for k, i := range byJoin {
		place[i] = k
	}
	stray := make([]time.Duration, len(byAdmission)) // in places, as durations for quantile
	for k, i := range byAdmission {
		d := k - place[i]
		if d < 0 {
			d = -d
		}
		stray[k] = time.Duration(d)
		r.strayMax = max(r.strayMax, d)
	}
	r.strayP50, r.strayP99 = int(quantile(stray, 0.5)), int(quantile(stray, 0.99))
	return r
}

// writeDoorTable prints the row beside the crowd with no door.
func writeDoorTable(w io.Writer, d doorRow, n noDoorRow) {
	ms := func(x time.Duration) string { return strconv.FormatInt(x.Milliseconds(), 10) }
	fmt.Fprintln(w, "| sale | orders | admission /s (configured) | admission order vs join order: places off p50 / p99 / max | join → pass p50 / p99 ms | pass → order p50 / p99 ms | busy answers | order p50 / p99 ms | wall s | CPU |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	fmt.Fprintf(w, "| waiting room | %d (%d admitted, %d sent home sold out) | %.0f (%d) | %d / %d / %d | %s / %s | %s / %s | %d | — | %.1f | %s |\n",
		d.orders, d.admitted, d.soldOutInLine, d.rate, d.admitPerS, d.strayP50, d.strayP99, d.strayMax,
		ms(d.joinToPass[0]), ms(d.joinToPass[1]), ms(d.passToOrder[0]), ms(d.passToOrder[1]), d.busy, d.wall.Seconds(), d.cpu)
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

// orderOf is the order a 201 answered.
func orderOf(body map[string]any) verify.Order {
	s := func(k string) string { v, _ := body[k].(string); return v }
	return verify.Order{OrderID: s("order_id"), UserID: s("user_id"), Status: s("status"), SKU: s("sku")}
}

// number reads a JSON number (0 if it is not one).
func number(v any) float64 {
	f, _ := v.(float64)
	return f
}

// quantile is the q-quantile of xs (nearest rank), 0 for none.
func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}

var errNoWaitingRoomTarget = errors.New("-waiting-room starts processes with buyer identity on (a key it signs buyer tokens with): leave out -target")
