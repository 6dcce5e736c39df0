// Package door is a crowd at a waiting room's door, as the load tool's waiting-room row and the
// process tests send it: buyers with tokens signed by a key of the crowd's own, each joining,
// polling as it is told, and ordering with its pass — through any of several instances, moving
// to the next when one stops answering, as a load balancer would send them.
package door

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/flashsale/seckill/loadtest/verify"
)

// Audience is the aud of the crowd's tokens: the services' SECKILL_BUYER_AUDIENCE.
const Audience = "seckill-loadtest"

// kid names the crowd's key in its JWKS.
const kid = "loadtest"

// Buyers are a crowd: a key of its own, published in a JWKS file the services read
// (SECKILL_BUYER_JWKS), and a token signed with it for every buyer — an authenticated sale, as
// a deployment runs it.
type Buyers struct {
	JWKS   string   // the JWKS file
	Tokens []string // bearer token of buyer i
	names  map[string]int
	key    ed25519.PrivateKey
}

// NewBuyers makes the key, writes its JWKS in dir and signs n tokens, each an hour to live, for
// buyers named prefix-u000000 on.
func NewBuyers(ctx context.Context, dir, prefix string, n int) (*Buyers, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
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
	b := &Buyers{JWKS: filepath.Join(dir, "buyers.jwks.json"), Tokens: make([]string, n), names: make(map[string]int, n), key: key}
	if err := os.WriteFile(b.JWKS, raw, 0o644); err != nil {
		return nil, err
	}
	exp := jwt.NewNumericDate(time.Now().Add(time.Hour))
	for i := range n {
		sub := fmt.Sprintf("%s-u%06d", prefix, i)
		if b.Tokens[i], err = b.Sign(jwt.RegisteredClaims{Subject: sub, Audience: jwt.ClaimStrings{Audience}, ExpiresAt: exp}); err != nil {
			return nil, err
		}
		b.names[sub] = i
	}
	return b, nil
}

// Sign signs claims with the crowd's key, as its tokens are: for a test's tokens of its own.
func (b *Buyers) Sign(claims jwt.Claims) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["kid"] = kid
	return t.SignedString(b.key)
}

// Token is the bearer token of the buyer named user ("" for a name the crowd did not sign).
func (b *Buyers) Token(user string) string {
	if i, ok := b.names[user]; ok {
		return b.Tokens[i]
	}
	return ""
}

// Client sends the crowd's requests, at most a set number in flight. Request i goes to target i
// (mod the targets); a target that cannot be reached hands it to the next, so a crowd outlives
// an instance killed under it.
type Client struct {
	http    *http.Client
	targets []string
	sem     chan struct{}
}

// NewClient sends requests through c to targets, at most inFlight at once.
func NewClient(c *http.Client, targets []string, inFlight int) *Client {
	return &Client{http: c, targets: targets, sem: make(chan struct{}, inFlight)}
}

// Request is one buyer request.
type Request struct {
	Method, Path, Body string
	Token              string // the buyer's bearer token
	Pass               string // Seckill-Pass, for an order
	Key                string // Idempotency-Key, for an order: resent to the next target, it is one order
}

// Answer is what one request heard.
type Answer struct {
	Status     int
	Code       string // the error's code, for a 4xx or 5xx
	Body       map[string]any
	Location   string
	RetryAfter time.Duration
	Took       time.Duration
	Target     string // the instance that answered
}

// Do sends r on target i, then on the next ones while a target cannot be reached.
func (c *Client) Do(ctx context.Context, i int, r Request) (Answer, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return Answer{}, ctx.Err()
	}
	defer func() { <-c.sem }()
	var err error
	for k := range c.targets {
		var a Answer
		if a, err = c.send(ctx, c.targets[(i+k)%len(c.targets)], r); err == nil || ctx.Err() != nil {
			return a, err
		}
	}
	return Answer{}, err
}

// Again is Do, sent again while it is answered 503 or 429 (after Retry-After, at least 100 ms),
// at most tries times: what a buyer's client does with an answer that says try again.
func (c *Client) Again(ctx context.Context, i int, r Request, tries int) (Answer, error) {
	for try := 1; ; try++ {
		a, err := c.Do(ctx, i, r)
		if err != nil || try >= tries || a.Status != http.StatusServiceUnavailable && a.Status != http.StatusTooManyRequests {
			return a, err
		}
		select {
		case <-time.After(max(a.RetryAfter, 100*time.Millisecond)):
		case <-ctx.Done():
			return a, ctx.Err()
		}
	}
}

// send is one try of r at target.
func (c *Client) send(ctx context.Context, target string, r Request) (Answer, error) {
	var rd io.Reader
	if r.Body != "" {
		rd = strings.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target+r.Path, rd)
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	if r.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Pass != "" {
		req.Header.Set("Seckill-Pass", r.Pass)
	}
	if r.Key != "" {
		req.Header.Set("Idempotency-Key", r.Key)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Status: resp.StatusCode, Location: resp.Header.Get("Location"), Took: time.Since(start), Target: target}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		a.RetryAfter = time.Duration(s) * time.Second
	}
	_ = json.Unmarshal(raw, &a.Body)
	if e, ok := a.Body["error"].(map[string]any); ok {
		a.Code, _ = e["code"].(string)
	}
	return a, nil
}

// Heard is a waiting answer's position, and when the buyer heard it.
type Heard struct {
	At       time.Time
	Position int64
}

// Visit is one buyer's way through the door: when it joined, when its pass came (the moment
// between the poll that still waited and the one that had it), when its order was answered.
type Visit struct {
	Joined, Admitted, Ordered time.Time
	AdmittedBy                time.Duration // how long before Admitted the previous poll was answered
	Order                     *verify.Order
	Status                    int    // the order's last answer
	Code                      string // its error code
	Busy                      int    // 429 busy answers on the way
	Ended                     string // why the buyer went home without an order, if it did
	Pass                      string // the pass it was admitted with
	PassExpires               time.Time
	Positions                 []Heard
}

// heard notes a waiting answer's position.
func (v *Visit) heard(body map[string]any, at time.Time) {
	if p, ok := body["position"].(float64); ok {
		v.Positions = append(v.Positions, Heard{At: at, Position: int64(p)})
	}
}

// Rose reports whether a position the buyer heard was higher than one it heard before.
func (v *Visit) Rose() bool {
	for k := 1; k < len(v.Positions); k++ {
		if v.Positions[k].Position > v.Positions[k-1].Position {
			return true
		}
	}
	return false
}

// tries is how many times a buyer sends a join or a poll that is answered "try again".
const tries = 20

// Admit is buyer i's way to the pass of sku: join, then poll as poll_after_ms says until the pass
// comes (or the sale ends the wait: Ended says why).
func Admit(ctx context.Context, c *Client, i int, sku, token string) Visit {
	var v Visit
	a, err := c.Again(ctx, i, Request{Method: http.MethodPost, Path: "/api/v1/products/" + sku + "/queue", Token: token, Body: "{}"}, tries)
	switch {
	case err != nil:
		v.Ended = "could not join: " + err.Error()
		return v
	case a.Status == http.StatusConflict && a.Code == "sold_out":
		v.Ended = "sold_out"
		return v
	case a.Status != http.StatusAccepted || a.Location == "":
		v.Ended = fmt.Sprintf("joined and heard %d %s", a.Status, a.Code)
		return v
	}
	v.Joined = time.Now()
	v.heard(a.Body, v.Joined)
	loc, last := a.Location, v.Joined
	for n := 0; v.Pass == ""; n++ {
		wait := time.Duration(number(a.Body["poll_after_ms"])) * time.Millisecond
		select {
		case <-time.After(max(wait, 10*time.Millisecond)):
		case <-ctx.Done():
			v.Ended = "was still waiting when the run's time was up"
			return v
		}
		if a, err = c.Again(ctx, n, Request{Method: http.MethodGet, Path: loc, Token: token}, tries); err != nil {
			v.Ended = "could not poll: " + err.Error()
			return v
		}
		switch {
		case a.Status == http.StatusConflict && a.Code == "sold_out":
			v.Ended = "sold_out"
			return v
		case a.Status != http.StatusOK:
			v.Ended = fmt.Sprintf("polled and heard %d %s", a.Status, a.Code)
			return v
		case a.Body["admitted"] == true:
			v.Pass, _ = a.Body["pass"].(string)
			if v.Pass == "" {
				v.Ended = "was admitted with no pass"
				return v
			}
			now := time.Now()
			v.AdmittedBy = now.Sub(last)
			v.Admitted = now.Add(-v.AdmittedBy / 2)
			v.PassExpires, _ = time.Parse(time.RFC3339Nano, fmt.Sprint(a.Body["pass_expires_at"]))
		default:
			last = time.Now()
			v.heard(a.Body, last)
		}
	}
	return v
}

// Walk is buyer i's way through the door of sku: Admit, then order with the pass, retrying busy
// answers, with one Idempotency-Key: an order resent to another instance is one order.
func Walk(ctx context.Context, c *Client, i int, sku, token string, retries int) Visit {
	v := Admit(ctx, c, i, sku, token)
	if v.Pass == "" {
		return v
	}
	key := fmt.Sprintf("door-%s-%d", sku, i)
	for try := 0; ; try++ {
		a, err := c.Do(ctx, i, Request{Method: http.MethodPost, Path: "/api/v1/products/" + sku + "/orders", Token: token, Pass: v.Pass, Key: key, Body: "{}"})
		if err != nil {
			v.Ended = "could not order: " + err.Error()
			return v
		}
		v.Ordered, v.Status, v.Code = time.Now(), a.Status, a.Code
		switch {
		case a.Status == http.StatusCreated:
			o := OrderOf(a.Body)
			v.Order = &o
			return v
		case a.Code == "busy" && try < retries:
			v.Busy++
			select {
			case <-time.After(max(a.RetryAfter, 100*time.Millisecond)):
			case <-ctx.Done():
				return v
			}
		case a.Code == "busy":
			v.Busy++
			return v
		case a.Code == "sold_out":
			return v
		default:
			v.Ended = fmt.Sprintf("ordered with its pass and heard %d %s", a.Status, a.Code)
			return v
		}
	}
}

// Summary is what the visits of a crowd say of its door.
type Summary struct {
	Admitted, Orders, SoldOutInLine int
	Rate                            float64 // admissions a second, as the waiting buyers' positions fell
	StrayP50, StrayP99, StrayMax    int     // |place in join order - place in admission order|
	JoinToPass, PassToOrder         [2]time.Duration
	Busy                            int
}

// Summarize reads the visits: the admission rate, how far admission strays from join order,
// and the waits.
func Summarize(visits []Visit) Summary {
	var r Summary
	var in []int // the buyers admitted
	var joinToPass, passToOrder []time.Duration
	for i, v := range visits {
		switch {
		case !v.Admitted.IsZero():
			in = append(in, i)
			joinToPass = append(joinToPass, v.Admitted.Add(v.AdmittedBy/2).Sub(v.Joined))
			if !v.Ordered.IsZero() {
				passToOrder = append(passToOrder, v.Ordered.Sub(v.Admitted.Add(v.AdmittedBy/2)))
			}
		case v.Ended == "sold_out":
			r.SoldOutInLine++
		}
		if v.Order != nil {
			r.Orders++
		}
		r.Busy += v.Busy
	}
	r.Admitted = len(in)
	r.Rate = Rate(visits, time.Time{}, time.Time{})
	r.JoinToPass = [2]time.Duration{Quantile(joinToPass, 0.5), Quantile(joinToPass, 0.99)}
	r.PassToOrder = [2]time.Duration{Quantile(passToOrder, 0.5), Quantile(passToOrder, 0.99)}
	if len(in) < 2 {
		return r
	}
	byAdmission := slices.Clone(in)
	slices.SortFunc(byAdmission, func(a, b int) int { return visits[a].Admitted.Compare(visits[b].Admitted) })
	byJoin := slices.Clone(in)
	slices.SortFunc(byJoin, func(a, b int) int { return visits[a].Joined.Compare(visits[b].Joined) })
	place := make(map[int]int, len(byJoin))
	for k, i := range byJoin {
		place[i] = k
	}
	stray := make([]time.Duration, len(byAdmission)) // in places, as durations for Quantile
	for k, i := range byAdmission {
		d := k - place[i]
		if d < 0 {
			d = -d
		}
		stray[k] = time.Duration(d)
		r.StrayMax = max(r.StrayMax, d)
	}
	r.StrayP50, r.StrayP99 = int(Quantile(stray, 0.5)), int(Quantile(stray, 0.99))
	return r
}

// Rate is the admissions a second between from and to (zero: unbounded), read from the positions
// the server answered, not from when passes were seen: a poll that waited its turn in a busy
// client or server says late that a buyer was let in, and those delays, longest at the start,
// would squeeze the admissions into less time than they took. Between its first and last
// waiting answer in the window the line moved first-last places in front of a buyer; pooled
// over every buyer, places over seconds is the serving counter's rate, and the answers' own
// delays weigh only at each buyer's two ends.
func Rate(visits []Visit, from, to time.Time) float64 {
	var places int64
	var waited time.Duration
	for _, v := range visits {
		var first, last *Heard
		for k := range v.Positions {
			h := &v.Positions[k]
			if h.At.Before(from) || !to.IsZero() && h.At.After(to) {
				continue
			}
			if first == nil {
				first = h
			}
			last = h
		}
		if first != nil && last.At.After(first.At) {
			places += first.Position - last.Position
			waited += last.At.Sub(first.At)
		}
	}
	if waited == 0 {
		return 0
	}
	return float64(places) / waited.Seconds()
}

// OrderOf is the order a 201 answered.
func OrderOf(body map[string]any) verify.Order {
	s := func(k string) string { v, _ := body[k].(string); return v }
	return verify.Order{OrderID: s("order_id"), UserID: s("user_id"), Status: s("status"), SKU: s("sku")}
}

// number reads a JSON number (0 if it is not one).
func number(v any) float64 {
	f, _ := v.(float64)
	return f
}

// Quantile is the q-quantile of xs (nearest rank), 0 for none.
func Quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}
