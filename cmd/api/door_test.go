package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/stock"
	"github.com/flashsale/seckill/loadtest/door"
)

// TestProcessesWaitingRoom is the front door across three processes with buyer identity on:
// 20,000 buyers with signed tokens join a waiting room admitting 500 a second for 5,000 units,
// poll as they are told and order with their pass, and one process is SIGKILLed mid-admission.
// The rate over the deployment stays within 10% of 500 a second before the kill and after it;
// no buyer's position ever rises, and every ticket ends (a pass and an order, or sold out) —
// those joined through the killed process included; every forgery of a token or a pass is
// refused with its code by every process; the invariant holds, and every order is one a buyer
// was answered 201 with its pass.
func TestProcessesWaitingRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 buyers on three processes; skipped with -short")
	}
	const (
		buyers = 20000
		units  = 5000
		rate   = 500
		killAt = 4 * time.Second // after the doors open: when process 2 is killed
		// opening is how long the crowd has to join before the doors open.
		opening = 20 * time.Second
	)
	ctx := t.Context()
	sku := backendtest.SKU(t)
	crowd, err := door.NewBuyers(ctx, t.TempDir(), sku, buyers+2)
	require.NoError(t, err)
	bin := buildService(t)
	var procs []instance
	var targets []string
	for range 3 {
		p := startProcess(t, bin, "SECKILL_BUYER_JWKS="+crowd.JWKS, "SECKILL_BUYER_AUDIENCE="+door.Audience)
		procs, targets = append(procs, p), append(targets, p.url)
	}
	transport := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}
	t.Cleanup(transport.CloseIdleConnections)
	client := door.NewClient(&http.Client{Timeout: 30 * time.Second, Transport: transport}, targets, 512)

	// Two buyers outside the crowd take passes to two rooms of their own: the forgeries are
	// made of them. The second room's passes expire first.
	forged, short := backendtest.SKU(t), backendtest.SKU(t)
	require.Equal(t, http.StatusOK, procs[0].call(t, "PUT", "/api/v1/products/"+forged,
		`{"name":"forgeries","stock":10,"max_per_order":1,"waiting_room":{"admit_per_s":1000}}`, nil))
	require.Equal(t, http.StatusOK, procs[0].call(t, "PUT", "/api/v1/products/"+short,
		`{"name":"short pass","stock":10,"max_per_order":1,"waiting_room":{"admit_per_s":1000,"pass_ttl_s":10}}`, nil))
	x, y := crowd.Tokens[buyers], crowd.Tokens[buyers+1]
	passX, passY, passShort := admitted(t, client, forged, x), admitted(t, client, forged, y), admitted(t, client, short, x)
	requireForgeriesRefused(t, client, crowd, forged, x, passX, passY, passShort)
	// The doors open opening seconds on: the crowd joins before them, as it does at a real sale,
	// and is let in at the rate from a line long from the first second, however slowly this
	// machine lets it join. Those who came early are drawn into a random order at the start.
	opens := time.Now().Add(opening).UTC()
	require.Equal(t, http.StatusOK, procs[0].call(t, "PUT", "/api/v1/products/"+sku,
		fmt.Sprintf(`{"name":"door","stock":%d,"max_per_order":1,"starts_at":%q,"waiting_room":{"admit_per_s":%d,"pass_ttl_s":120}}`,
			units, opens.Format(time.RFC3339Nano), rate), nil))

	// The crowd, with process 2 killed mid-admission.
	visits := make([]door.Visit, buyers)
	var wg sync.WaitGroup
	saleCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for i := range buyers {
		wg.Go(func() { visits[i] = door.Walk(saleCtx, client, i, sku, crowd.Tokens[i], 100) })
	}
	// Admission is the room's clock: killAt after the doors open the counter has passed a tenth
	// of the line, and the rest is to come.
	select {
	case <-time.After(time.Until(opens.Add(killAt))):
	case <-saleCtx.Done():
	}
	procs[2].kill()
	killed := time.Now()
	wg.Wait()
	require.NoError(t, saleCtx.Err(), "the crowd was through the door within the run's time")
	var joinedEarly int
	for _, v := range visits {
		if !v.Joined.IsZero() && v.Joined.Before(opens) {
			joinedEarly++
		}
	}
	t.Logf("%d of %d buyers joined before the doors opened; process 2 killed %v after they opened", joinedEarly, buyers, killed.Sub(opens))
	var acked []stock.Order
	for i, v := range visits {
		assert.False(t, v.Rose(), "buyer %d heard its position rise: %v", i, v.Positions)
		if v.Ended != "" && v.Ended != "sold_out" || v.Code == "busy" {
			t.Errorf("buyer %d's ticket did not end: it %s (last order answer %d %s)", i, v.Ended, v.Status, v.Code)
		}
		if v.Order != nil {
			acked = append(acked, stock.Order{OrderID: v.Order.OrderID, UserID: v.Order.UserID, SKU: sku})
		}
	}
	s := door.Summarize(visits)
	t.Logf("%d admitted, %d orders, %d sent home sold out; admission as the buyers' positions fell %.0f/s", s.Admitted, s.Orders, s.SoldOutInLine, s.Rate)
	assert.InEpsilon(t, rate, s.Rate, 0.1, "admission as the buyers heard their positions fall: one counter for the deployment, not one per process")

	// The rate and the order by the room's own clock: when the counter passed each admitted
	// buyer's place, as Redis keeps it — the clients' polls, late on a busy machine, tell it
	// only roughly.
	in := admissions(t, sku)
	require.Greater(t, len(in), units/2, "buyers admitted")
	for k := 1; k < len(in); k++ {
		require.Greater(t, in[k].place, in[k-1].place, "admitted in line order: %+v then %+v", in[k-1], in[k])
	}
	rateOf := func(from, to time.Time) float64 {
		var first, last *admission
		for k := range in {
			if in[k].at.Before(from) || in[k].at.After(to) {
				continue
			}
			if first == nil {
				first = &in[k]
			}
			last = &in[k]
		}
		require.NotNil(t, first, "admissions between %v and %v", from, to)
		return float64(last.place-first.place) / last.at.Sub(first.at).Seconds()
	}
	whole, before, after := rateOf(in[0].at, in[len(in)-1].at), rateOf(in[0].at, killed), rateOf(killed, in[len(in)-1].at)
	t.Logf("admission by Redis's clock: %.1f/s over the sale, %.1f/s before the kill, %.1f/s after it", whole, before, after)
	assert.InEpsilon(t, rate, whole, 0.1, "admission over the deployment")
	assert.InEpsilon(t, rate, before, 0.1, "admission before the kill")
	assert.InEpsilon(t, rate, after, 0.1, "admission after the kill: one counter, no instance drives it")
	tickets, err := backendtest.Redis(t).HLen(ctx, frontdoor.NewRoom(nil, nil, frontdoor.Options{}).Keys(sku).Tickets).Result()
	require.NoError(t, err)
	assert.EqualValues(t, buyers, tickets, "one ticket for every buyer, none lost with the process killed")
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, acked)

	// A pass outlives no expiry: the short room's, ten seconds after it was issued.
	time.Sleep(time.Until(passShort.PassExpires.Add(time.Second)))
	requireRefused(t, client, 0, door.Request{Method: http.MethodPost, Path: "/api/v1/products/" + short + "/orders", Token: x, Pass: passShort.Pass, Body: "{}"},
		http.StatusForbidden, "pass_invalid", "an expired pass")
}

// admission is when the serving counter passed an admitted buyer's place.
type admission struct {
	place int64
	at    time.Time
}

// admissions reads sku's room in Redis: every admitted buyer's place and when the counter passed
// it, by Redis's clock, in the order of those times.
func admissions(t *testing.T, sku string) []admission {
	t.Helper()
	ctx, rdb := t.Context(), backendtest.Redis(t)
	keys := frontdoor.NewRoom(nil, nil, frontdoor.Options{}).Keys(sku)
	admitted, err := rdb.HGetAll(ctx, keys.Admitted).Result()
	require.NoError(t, err)
	early, err := rdb.ZRange(ctx, keys.Early, 0, -1).Result()
	require.NoError(t, err)
	places, err := rdb.HGetAll(ctx, keys.Places).Result()
	require.NoError(t, err)
	placeOf := make(map[string]int64, len(early)+len(places))
	for k, buyer := range early {
		placeOf[buyer] = int64(k + 1)
	}
	for buyer, p := range places {
		placeOf[buyer], err = strconv.ParseInt(p, 10, 64)
		require.NoError(t, err)
	}
	var in []admission
	for buyer, v := range admitted {
		at, _, ok := strings.Cut(v, "|")
		require.True(t, ok, "admitted %s: %q", buyer, v)
		us, err := strconv.ParseInt(at, 10, 64)
		require.NoError(t, err)
		p, ok := placeOf[buyer]
		require.True(t, ok, "admitted %s has a place in line", buyer)
		in = append(in, admission{place: p, at: time.UnixMicro(us)})
	}
	slices.SortFunc(in, func(a, b admission) int { return a.at.Compare(b.at) })
	return in
}

// admitted joins sku's room as the buyer of token and polls until it has its pass.
func admitted(t *testing.T, c *door.Client, sku, token string) door.Visit {
	t.Helper()
	v := door.Admit(t.Context(), c, 0, sku, token)
	require.NotEmpty(t, v.Pass, "admitted to %s: %s", sku, v.Ended)
	require.False(t, v.PassExpires.IsZero(), "a pass says when it expires")
	return v
}

// requireRefused sends r to process i and requires the error it is answered with.
func requireRefused(t *testing.T, c *door.Client, i int, r door.Request, status int, code, what string) {
	t.Helper()
	a, err := c.Do(t.Context(), i, r)
	require.NoError(t, err)
	assert.Equal(t, status, a.Status, "%s on %s: %v", what, a.Target, a.Body)
	assert.Equal(t, code, a.Code, "%s on %s", what, a.Target)
}

// requireForgeriesRefused sends every forgery of a buyer token and of a pass to each of the
// three processes, as an order of sku: 401 unauthenticated for a token, 403 pass_required or
// pass_invalid for a pass. x is a buyer's good token; passX and passY are x's and another
// buyer's passes to sku, passShort x's pass to another product.
func requireForgeriesRefused(t *testing.T, c *door.Client, crowd *door.Buyers, sku, x string, passX, passY, passShort door.Visit) {
	t.Helper()
	exp := time.Now().Add(time.Hour).Unix()
	good := jwt.MapClaims{"sub": "forger", "aud": door.Audience, "exp": exp}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	signed := func(claims jwt.MapClaims) string {
		s, err := crowd.Sign(claims)
		require.NoError(t, err)
		return s
	}
	_, otherKey, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	foreign := func(m jwt.SigningMethod, key any, kid string) string {
		tok := jwt.NewWithClaims(m, good)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	tokens := map[string]string{
		"no token":      "",
		"garbage":       "not.a.jwt",
		"bad signature": foreign(jwt.SigningMethodEdDSA, otherKey, "loadtest"),
		"unknown kid":   foreign(jwt.SigningMethodEdDSA, otherKey, "k9"),
		"exp missing":   signed(with("exp", nil)),
		"exp passed":    signed(with("exp", time.Now().Add(-time.Minute).Unix())),
		"nbf in future": signed(with("nbf", time.Now().Add(time.Hour).Unix())),
		"wrong aud":     signed(with("aud", "another")),
		"alg none":      foreign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "loadtest"),
		"hmac":          foreign(jwt.SigningMethodHS256, []byte("public-key-as-secret"), "loadtest"),
		"no sub":        signed(with("sub", nil)),
	}
	order := func(token, pass string) door.Request {
		return door.Request{Method: http.MethodPost, Path: "/api/v1/products/" + sku + "/orders", Token: token, Pass: pass, Body: "{}"}
	}
	for i := range 3 {
		for name, token := range tokens {
			requireRefused(t, c, i, order(token, passX.Pass), http.StatusUnauthorized, "unauthenticated", "a token with "+name)
		}
		requireRefused(t, c, i, order(x, ""), http.StatusForbidden, "pass_required", "no pass")
		requireRefused(t, c, i, order(x, passX.Pass+"x"), http.StatusForbidden, "pass_invalid", "a forged pass")
		requireRefused(t, c, i, order(x, passY.Pass), http.StatusForbidden, "pass_invalid", "another buyer's pass")
		requireRefused(t, c, i, order(x, passShort.Pass), http.StatusForbidden, "pass_invalid", "another product's pass")
	}
}
