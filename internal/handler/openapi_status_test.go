package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// serviceErrors are the errors each Sales method can return: what the service's store, locks
// and backends can make of a request (a read finds nothing, a backend is down or slow, a lock
// wait runs out, a bug), never what the handler has already refused. A client's cancellation
// (499 canceled) is left out: no client reads that answer, and the contract says so.
var serviceErrors = map[string][]error{
	"Resolve": {&stock.InvalidError{Msg: "unknown strategy"}},
	"Place": {&stock.InvalidError{Msg: "over max_per_order"}, stock.ErrNotFound, stock.ErrSoldOut, stock.ErrAlreadyPurchased,
		&stock.CheckoutError{SKUs: []string{"case-17"}, Err: stock.ErrNotFound}, &stock.CheckoutError{SKUs: []string{"case-17"}, Err: stock.ErrSoldOut},
		stock.ErrIdempotencyConflict, &stock.SaleNotStartedError{Starts: time.Now().Add(time.Minute)}, stock.ErrSaleEnded,
		stock.ErrBusy, stock.ErrDuplicateRequest, stock.ErrUnavailable, errors.New("a bug")},
	"PutProduct": {stock.ErrBusy, stock.ErrUnavailable, errors.New("a bug")},
	"Product":    {stock.ErrNotFound, stock.ErrUnavailable, errors.New("a bug")},
	"Products":   {stock.ErrUnavailable, errors.New("a bug")},
	"Read":       {stock.ErrNotFound, stock.ErrUnavailable, errors.New("a bug")},
	"Wait":       {stock.ErrNotFound, stock.ErrUnavailable, errors.New("a bug")},
	"Pay":        {stock.ErrNotFound, stock.ErrOrderExpired, stock.ErrOrderCancelled, stock.ErrBusy, stock.ErrUnavailable, errors.New("a bug")},
	"Cancel":     {stock.ErrNotFound, stock.ErrOrderExpired, stock.ErrBusy, stock.ErrUnavailable, errors.New("a bug")},
	"Audit":      {stock.ErrNotFound, stock.ErrUnavailable, errors.New("a bug")},
	"Reconcile":  {stock.ErrNotFound, stock.ErrUnavailable, errors.New("a bug")},
	"Checks":     {stock.ErrUnavailable},
	"Locks":      nil, // names only: no backend is asked
}

// probeSales answers every call with success, or with fail[method] for that method, and notes
// which methods a request called. It embeds Sales so that it still compiles when Sales grows:
// a method it lacks panics, the route answers 500 to a valid request, and the test says so.
type probeSales struct {
	Sales
	fail   map[string]error
	called map[string]bool
	queued bool // Place succeeds as the queued strategy does: accepted, not yet written
}

func (p *probeSales) err(method string) error {
	p.called[method] = true
	return p.fail[method]
}

func (p *probeSales) Resolve(requested string) (string, error) { return "hybrid", p.err("Resolve") }
func (p *probeSales) PutProduct(context.Context, stock.ProductSpec) (stock.Product, error) {
	return stock.Product{}, p.err("PutProduct")
}
func (p *probeSales) Product(context.Context, string) (stock.Product, error) {
	return stock.Product{}, p.err("Product")
}
func (p *probeSales) Products(context.Context, int) ([]stock.Product, error) {
	return nil, p.err("Products")
}
func (p *probeSales) Place(_ context.Context, req stock.CheckoutRequest) (stock.Checkout, bool, error) {
	co := stock.Checkout{Lines: make([]stock.Order, max(1, len(req.Lines)))}
	if p.queued {
		co.Status, co.Lines[0].Status = stock.Queued, stock.Queued
	}
	return co, false, p.err("Place")
}
func (p *probeSales) Read(context.Context, stock.Ref) (stock.Checkout, error) {
	return stock.Checkout{Lines: make([]stock.Order, 1)}, p.err("Read")
}
func (p *probeSales) Wait(context.Context, stock.Ref, time.Duration) (stock.Checkout, error) {
	return stock.Checkout{Lines: make([]stock.Order, 1)}, p.err("Wait")
}
func (p *probeSales) Pay(context.Context, stock.Ref, string) (stock.Checkout, error) {
	return stock.Checkout{Lines: make([]stock.Order, 1)}, p.err("Pay")
}
func (p *probeSales) Cancel(context.Context, stock.Ref, string) (stock.Checkout, error) {
	return stock.Checkout{Lines: make([]stock.Order, 1)}, p.err("Cancel")
}
func (p *probeSales) Audit(context.Context, string) (service.Audit, error) {
	return service.Audit{}, p.err("Audit")
}
func (p *probeSales) Reconcile(context.Context, string) (service.Audit, error) {
	return service.Audit{}, p.err("Reconcile")
}
func (p *probeSales) Locks(string) service.Locks {
	p.called["Locks"] = true
	return service.Locks{}
}
func (p *probeSales) Checks() []service.Check {
	return []service.Check{{Name: "database", Ping: func(context.Context) error { return p.err("Checks") }}}
}

// spec is the part of openapi.yaml the status test reads.
type spec struct {
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Parameters map[string]specParam `yaml:"parameters"`
	} `yaml:"components"`
}

type specParam struct {
	Ref     string `yaml:"$ref"`
	Name    string `yaml:"name"`
	In      string `yaml:"in"`
	Example any    `yaml:"example"`
}

type specOp struct {
	Parameters  []specParam `yaml:"parameters"`
	RequestBody struct {
		Content map[string]struct {
			Example any `yaml:"example"`
		} `yaml:"content"`
	} `yaml:"requestBody"`
	Responses map[string]yaml.Node `yaml:"responses"`
}

// operation is one documented operation: its parameters (the path's and its own, references
// resolved), its example body and the statuses it lists.
type operation struct {
	params   []specParam
	body     []byte
	statuses []int
}

// operations reads every operation of the document, keyed "METHOD /path/{param}".
func operations(t *testing.T, doc []byte) map[string]operation {
	t.Helper()
	var s spec
	require.NoError(t, yaml.Unmarshal(doc, &s))
	resolve := func(p specParam) specParam {
		if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			return s.Components.Parameters[name]
		}
		return p
	}
	out := map[string]operation{}
	for path, item := range s.Paths {
		var shared []specParam
		if n, ok := item["parameters"]; ok {
			require.NoError(t, n.Decode(&shared))
		}
		for method, n := range item {
			if method == "parameters" {
				continue
			}
			var op specOp
			require.NoError(t, n.Decode(&op))
			var o operation
			for _, p := range append(slices.Clone(shared), op.Parameters...) {
				o.params = append(o.params, resolve(p))
			}
			if c, ok := op.RequestBody.Content["application/json"]; ok && c.Example != nil {
				b, err := json.Marshal(c.Example)
				require.NoError(t, err)
				o.body = b
			}
			for code := range op.Responses {
				status, err := strconv.Atoi(code)
				require.NoError(t, err, "%s %s lists response %q: statuses only, no default", method, path, code)
				o.statuses = append(o.statuses, status)
			}
			slices.Sort(o.statuses)
			out[strings.ToUpper(method)+" "+path] = o
		}
	}
	return out
}

// probe is one way of sending a route's request: the valid one, or one thing wrong with it.
type probe struct {
	name string
	edit func(r *http.Request, o operation) *http.Request
}

// probes are what the handler's own layers answer, whichever the route: the admin check, the
// body limit and decoding, the path and header parameters' validation.
var probes = []probe{
	{"valid", func(r *http.Request, _ operation) *http.Request { return r }},
	{"no admin token", func(r *http.Request, _ operation) *http.Request { r.Header.Del("Authorization"); return r }},
	{"wrong admin token", func(r *http.Request, _ operation) *http.Request {
		r.Header.Set("Authorization", "Bearer wrong")
		return r
	}},
	{"body over the limit", func(r *http.Request, o operation) *http.Request {
		return withBody(r, string(o.body)+strings.Repeat(" ", maxBodyBytes))
	}},
	{"malformed body", func(r *http.Request, _ operation) *http.Request { return withBody(r, "{") }},
}

func withBody(r *http.Request, body string) *http.Request {
	n := httptest.NewRequest(r.Method, r.URL.String(), strings.NewReader(body))
	n.Header, n.RemoteAddr = r.Header, r.RemoteAddr
	return n
}

// deriveStatuses drives every route of the router and returns the statuses each answered,
// keyed like operations: to the valid request built from the document's examples, to each
// probe, to each error the Sales methods it called can return, and to a client over its rate.
func deriveStatuses(t *testing.T, ops map[string]operation) map[string][]int {
	t.Helper()
	sales := &probeSales{called: map[string]bool{}}
	reg := prometheus.NewRegistry()
	h, err := New(Config{Sales: sales, AdminToken: "token", Log: slog.New(slog.DiscardHandler), Registerer: reg, Gatherer: reg,
		RateLimit: RateLimit{Rate: 0.001, Burst: 1}})
	require.NoError(t, err)
	clients := 0
	send := func(r *http.Request, sameClient bool) int {
		if !sameClient {
			clients++ // a client of its own, so that the rate limit bites only where it is probed
		}
		r.RemoteAddr = fmt.Sprintf("10.0.%d.%d:4000", clients/250, clients%250+1)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	out := map[string][]int{}
	for _, route := range h.(*gin.Engine).Routes() {
		key := route.Method + " " + param.ReplaceAllString(route.Path, "{$1}")
		o, ok := ops[key]
		if !ok {
			continue // TestOpenAPI names routes the document lacks
		}
		valid := func(values map[string]string) *http.Request {
			path := route.Path
			for _, p := range o.params {
				if p.In == "path" {
					v := values[p.Name]
					if v == "" {
						v = fmt.Sprint(p.Example)
					}
					path = strings.ReplaceAll(path, ":"+p.Name, v)
				}
			}
			query := url.Values{}
			for _, p := range o.params {
				if p.In == "query" {
					v := values[p.Name]
					if v == "" {
						v = fmt.Sprint(p.Example)
					}
					query.Set(p.Name, v)
				}
			}
			if len(query) > 0 {
				path += "?" + query.Encode()
			}
			r := httptest.NewRequest(route.Method, path, strings.NewReader(string(o.body)))
			r.Header.Set("Authorization", "Bearer token")
			for _, p := range o.params {
				if p.In == "header" {
					v := values[p.Name]
					if v == "" {
						v = fmt.Sprint(p.Example)
					}
					r.Header.Set(p.Name, v)
				}
			}
			return r
		}
		seen := map[int]bool{}
		sales.fail, sales.called = nil, map[string]bool{}
		for _, pr := range probes {
			seen[send(pr.edit(valid(nil), o), false)] = true
		}
		called := slices.Sorted(maps.Keys(sales.called))
		if send(valid(nil), false) == http.StatusInternalServerError {
			t.Errorf("%s answers 500 to the valid request built from its examples: does it call a Sales method probeSales lacks?", key)
		}
		for _, p := range o.params {
			if p.In == "path" || p.In == "header" || p.In == "query" {
				seen[send(valid(map[string]string{p.Name: strings.Repeat("x", 200)}), false)] = true
			}
		}
		for _, method := range called {
			errs, ok := serviceErrors[method]
			assert.True(t, ok, "%s calls Sales.%s, whose errors serviceErrors does not list", key, method)
			for _, e := range errs {
				sales.fail = map[string]error{method: e}
				seen[send(valid(nil), false)] = true
			}
			sales.fail = nil
		}
		if slices.Contains(called, "Place") {
			sales.queued = true // the queued strategy's answer
			seen[send(valid(nil), false)] = true
			sales.queued = false
		}
		send(valid(nil), false)
		seen[send(valid(nil), true)] = true // the same client at once: over its rate, where the limiter covers the route
		for _, status := range roomAnswers[key] {
			seen[status] = true
		}
		out[key] = slices.Sorted(maps.Keys(seen))
	}
	return out
}

// roomAnswers are the statuses a waiting room answers from its Redis state, which this test,
// with no backends, cannot drive: frontdoor_test.go drives them (TestQueueAndPass). So are an
// event stream's, whose handler here has no feed (503): events_test.go drives them (TestEvents).
var roomAnswers = map[string][]int{
	"POST /api/v1/products/{sku}/queue":         {http.StatusAccepted},
	"GET /api/v1/products/{sku}/queue/{ticket}": {http.StatusOK},
	"GET /api/v1/products/{sku}/events":         {http.StatusOK, http.StatusNotFound},
}

// statusProblems compares what the handler answered with what the document lists.
func statusProblems(ops map[string]operation, derived map[string][]int) []string {
	var problems []string
	for _, key := range slices.Sorted(maps.Keys(derived)) {
		listed := ops[key].statuses
		for _, s := range derived[key] {
			if !slices.Contains(listed, s) {
				problems = append(problems, fmt.Sprintf("%s can answer %d, which openapi.yaml does not list", key, s))
			}
		}
		for _, s := range listed {
			if !slices.Contains(derived[key], s) {
				problems = append(problems, fmt.Sprintf("%s lists %d, which it cannot answer", key, s))
			}
		}
	}
	return problems
}

// TestOpenAPIStatuses: every operation lists exactly the statuses its route can answer, as
// the handler is driven — its validation, the admin check, the body limit, the rate limit, and
// the error table applied to every error its service calls can return.
func TestOpenAPIStatuses(t *testing.T) {
	ops := operations(t, openAPI)
	derived := deriveStatuses(t, ops)
	require.NotEmpty(t, derived)
	for _, key := range slices.Sorted(maps.Keys(derived)) {
		t.Logf("%s: %v", key, derived[key])
	}
	assert.Equal(t, []int{200, 400, 401, 404, 409, 429, 500, 503}, derived["POST /api/v1/orders/{order_id}/cancel"],
		"the derivation itself: the buyer's cancel meets every layer")
	assert.Empty(t, statusProblems(ops, derived))
}

// TestOpenAPIStatusesCatchGaps: a status taken out of the document, and one added that cannot
// happen, are both reported.
func TestOpenAPIStatusesCatchGaps(t *testing.T) {
	doc := strings.Replace(string(openAPI), `      summary: Read a product
      responses:
        "200": { $ref: "#/components/responses/Product" }
        "400": { $ref: "#/components/responses/Invalid" }
        "404": { $ref: "#/components/responses/NotFound" }
        "429": { $ref: "#/components/responses/RateLimited" }
        "500": { $ref: "#/components/responses/Internal" }
        "503": { $ref: "#/components/responses/Unavailable" }`, `      summary: Read a product
      responses:
        "200": { $ref: "#/components/responses/Product" }
        "400": { $ref: "#/components/responses/Invalid" }
        "404": { $ref: "#/components/responses/NotFound" }
        "409": { $ref: "#/components/responses/Conflict" }
        "429": { $ref: "#/components/responses/RateLimited" }
        "500": { $ref: "#/components/responses/Internal" }`, 1)
	require.NotEqual(t, string(openAPI), doc, "the planted change did not apply")
	ops := operations(t, []byte(doc))
	assert.ElementsMatch(t, []string{
		"GET /api/v1/products/{sku} can answer 503, which openapi.yaml does not list",
		"GET /api/v1/products/{sku} lists 409, which it cannot answer",
	}, statusProblems(ops, deriveStatuses(t, ops)))
}
