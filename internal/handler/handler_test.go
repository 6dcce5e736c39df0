package handler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/handler"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

const adminToken = "test-token"

// admin is the header of an authenticated admin request.
var admin = header{"Authorization": "Bearer " + adminToken}

// header is the request headers a test sends.
type header map[string]string

// server is the handler as cmd/api builds it — app.Open: service.New, then handler.New — over
// a real store.
type server struct {
	http.Handler
	store *stock.Store
}

// newServer builds the handler on an instance in the default configuration, over a store of
// its own and the shared test Redis and etcd.
func newServer(t testing.TB) *server {
	t.Helper()
	return newServerOn(t, service.Defaults(), backendtest.Wiring{})
}

// newServerOn builds the handler on an instance of cfg over the backends w names; tweak changes
// the rest of the instance's configuration (cmd/api's settings of the HTTP side).
func newServerOn(t testing.TB, cfg service.Config, w backendtest.Wiring, tweak ...func(*app.Config)) *server {
	t.Helper()
	c := w.Config(t, cfg)
	c.AdminToken = adminToken
	for _, f := range tweak {
		f(&c)
	}
	inst := backendtest.Open(t, c, w.Store)
	return &server{Handler: inst.Handler, store: inst.Store}
}

// do sends one request through the handler. An empty body sends no body at all.
func (s *server) do(t *testing.T, method, target, body string, h header) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func productPath(sku string) string { return "/api/v1/products/" + sku }
func ordersPath(sku string) string  { return "/api/v1/products/" + sku + "/orders" }
func auditPath(sku string) string   { return "/api/v1/products/" + sku + "/audit" }
func orderPath(id string) string    { return "/api/v1/orders/" + id }

// The response bodies of the contract (openapi.yaml), with the fields each must carry.
type (
	productResponse struct {
		SKU             string        `json:"sku"`
		Name            string        `json:"name"`
		InitialStock    int64         `json:"initial_stock"`
		Stock           int64         `json:"stock"`
		Sold            int64         `json:"sold"`
		Version         int64         `json:"version"`
		MaxPerOrder     int           `json:"max_per_order"`
		StartsAt        *time.Time    `json:"starts_at"`
		EndsAt          *time.Time    `json:"ends_at"`
		PaymentTimeoutS int           `json:"payment_timeout_s"`
		WaitingRoom     *roomResponse `json:"waiting_room"`
	}
	roomResponse struct {
		AdmitPerS int `json:"admit_per_s"`
		PassTTLS  int `json:"pass_ttl_s"`
	}
)

var (
	productFields = []string{"sku", "name", "initial_stock", "stock", "sold", "version", "max_per_order", "payment_timeout_s"}
	orderFields   = []string{"order_id", "sku", "user_id", "quantity", "strategy", "status", "created_at"}
	// redis_stock is left out: this build has no Redis admission state (see the report).
	auditFields = []string{"sku", "initial_stock", "stock", "ordered_quantity", "orders", "distinct_buyers", "oversold", "consistent",
		"pending", "cancelled", "expired"}
)

// ulidPattern is Crockford base32, 26 characters: the shape of an order id.
var ulidPattern = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`)

// decode requires a JSON response of status that carries every one of fields (more are allowed:
// the contract may be extended), and decodes it into T.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder, status int, fields []string) T {
	t.Helper()
	require.Equal(t, status, rec.Code, "body: %s", rec.Body)
	assert.Contains(t, rec.Header().Get("Content-Type"), "application/json")
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &raw), "body: %s", rec.Body)
	for _, f := range fields {
		assert.Contains(t, raw, f, "body: %s", rec.Body)
	}
	var v T
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	return v
}

// assertError checks a response is exactly {"error":{"code":code,"message":"..."}} with status,
// and returns the message.
func assertError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) string {
	t.Helper()
	assert.Equal(t, status, rec.Code, "body: %s", rec.Body)
	assert.Contains(t, rec.Header().Get("Content-Type"), "application/json")
	var body map[string]json.RawMessage
	if !assert.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "body: %s", rec.Body) {
		return ""
	}
	assert.Equal(t, []string{"error"}, slices.Sorted(maps.Keys(body)), "body: %s", rec.Body)
	return assertErrorDetail(t, body["error"], code)
}

// assertErrorDetail checks the inner object is exactly {"code":code,"message":"<non-empty>"}.
func assertErrorDetail(t *testing.T, raw json.RawMessage, code string) string {
	t.Helper()
	var detail map[string]any
	if !assert.NoError(t, json.Unmarshal(raw, &detail), "error: %s", raw) {
		return ""
	}
	assert.Equal(t, []string{"code", "message"}, slices.Sorted(maps.Keys(detail)), "error: %s", raw)
	assert.Equal(t, code, detail["code"], "error: %s", raw)
	message, ok := detail["message"].(string)
	assert.True(t, ok, "message is not a string: %s", raw)
	assert.NotEmpty(t, message)
	return message
}

// assertRetryAfter checks the Retry-After header is a whole number of seconds, at least 1.
func assertRetryAfter(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	seconds, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if assert.NoError(t, err, "Retry-After %q", rec.Header().Get("Retry-After")) {
		assert.GreaterOrEqual(t, seconds, 1)
	}
}

// putProduct starts a sale round of sku through the API.
func (s *server) putProduct(t *testing.T, sku string, stockUnits int64, maxPerOrder int) productResponse {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": "Product " + sku, "stock": stockUnits, "max_per_order": maxPerOrder})
	require.NoError(t, err)
	return decode[productResponse](t, s.do(t, http.MethodPut, productPath(sku), string(body), admin), http.StatusOK, productFields)
}

// product reads sku through the public API.
func (s *server) product(t *testing.T, sku string) productResponse {
	t.Helper()
	return decode[productResponse](t, s.do(t, http.MethodGet, productPath(sku), "", nil), http.StatusOK, productFields)
}

// audit reads sku's audit through the admin API.
func (s *server) audit(t *testing.T, sku string) contract.Audit {
	t.Helper()
	return decode[contract.Audit](t, s.do(t, http.MethodGet, auditPath(sku), "", admin), http.StatusOK, auditFields)
}

// order places an order that must succeed.
func (s *server) order(t *testing.T, sku, body string, h header) contract.Order {
	t.Helper()
	return decode[contract.Order](t, s.do(t, http.MethodPost, ordersPath(sku), body, h), http.StatusCreated, orderFields)
}

// requireUntouched checks that sku still has all of its stock and no orders.
func (s *server) requireUntouched(t *testing.T, sku string, stockUnits int64) {
	t.Helper()
	p := s.product(t, sku)
	assert.Equal(t, stockUnits, p.Stock, "stock changed")
	assert.Zero(t, p.Sold, "sold changed")
	a := s.audit(t, sku)
	assert.Zero(t, a.Orders, "orders were written")
	assert.True(t, a.Consistent, "%+v", a)
}

func TestPutProduct(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)

	created := decode[productResponse](t,
		s.do(t, http.MethodPut, productPath(sku), `{"name":"iPhone 17","stock":10}`, admin), http.StatusOK, productFields)
	assert.Equal(t, productResponse{
		SKU: sku, Name: "iPhone 17", InitialStock: 10, Stock: 10, Sold: 0, Version: created.Version, MaxPerOrder: 1,
	}, created, "max_per_order defaults to 1")
	assert.Positive(t, created.Version)
	assert.Equal(t, created, s.product(t, sku), "GET answers what PUT created")

	// Sell some, so that the reset has something to undo.
	s.putProduct(t, sku, 10, 2)
	first := s.order(t, sku, `{"user_id":"u-1","quantity":2}`, nil)
	s.order(t, sku, `{"user_id":"u-2"}`, nil)
	before := s.product(t, sku)
	assert.Equal(t, int64(7), before.Stock)
	assert.Equal(t, int64(3), before.Sold)

	reset := decode[productResponse](t,
		s.do(t, http.MethodPut, productPath(sku), `{"name":"iPhone 17 Pro","stock":4,"max_per_order":3}`, admin),
		http.StatusOK, productFields)
	assert.Equal(t, productResponse{
		SKU: sku, Name: "iPhone 17 Pro", InitialStock: 4, Stock: 4, Sold: 0, Version: reset.Version, MaxPerOrder: 3,
	}, reset)
	assert.Greater(t, reset.Version, before.Version, "a reset bumps the version")
	assert.Equal(t, reset, s.product(t, sku))

	a := s.audit(t, sku)
	assert.Zero(t, a.Orders, "a reset deletes the round's orders")
	assert.True(t, a.Consistent)
	assertError(t, s.do(t, http.MethodGet, orderPath(first.OrderID), "", nil), http.StatusNotFound, "not_found")

	// The user who bought in the old round may buy again in the new one.
	s.order(t, sku, `{"user_id":"u-1","quantity":3}`, nil)
	assert.Equal(t, int64(1), s.product(t, sku).Stock)
}

func TestPutProductInvalid(t *testing.T) {
	s := newServer(t)
	fresh := backendtest.SKU(t) // never created: every case must leave it absent
	existing := backendtest.SKU(t)
	s.putProduct(t, existing, 5, 1)
	s.order(t, existing, `{"user_id":"u-1"}`, nil)
	before := s.product(t, existing)

	tests := []struct {
		name string
		body string
	}{
		{"missing name", `{"stock":10}`},
		{"empty name", `{"name":"","stock":10}`},
		{"name over 128 bytes", `{"name":"` + strings.Repeat("n", 129) + `","stock":10}`},
		{"name with a control character", `{"name":"a\u0007b","stock":10}`},
		{"name with invalid UTF-8", "{\"name\":\"a\xffb\",\"stock\":10}"},
		{"missing stock", `{"name":"x"}`},
		{"negative stock", `{"name":"x","stock":-1}`},
		{"stock beyond the sanity bound", `{"name":"x","stock":1000000001}`},
		{"stock as a string", `{"name":"x","stock":"10"}`},
		{"fractional stock", `{"name":"x","stock":1.5}`},
		{"max_per_order 0", `{"name":"x","stock":10,"max_per_order":0}`},
		{"negative max_per_order", `{"name":"x","stock":10,"max_per_order":-1}`},
		{"max_per_order beyond the sanity bound", `{"name":"x","stock":10,"max_per_order":1000001}`},
		{"unknown field", `{"name":"x","stock":10,"price":999}`},
		{"malformed JSON", `{"name":"x",`},
		{"empty body", ``},
		{"null", `null`},
		{"array", `[]`},
		{"trailing data", `{"name":"x","stock":10}{}`},
		{"body over 4 KiB", strings.Repeat(" ", 5000) + `{"name":"x","stock":10}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sku := range []string{fresh, existing} {
				assertError(t, s.do(t, http.MethodPut, productPath(sku), tt.body, admin), http.StatusBadRequest, "invalid_argument")
			}
			assertError(t, s.do(t, http.MethodGet, productPath(fresh), "", nil), http.StatusNotFound, "not_found")
			assert.Equal(t, before, s.product(t, existing), "a refused PUT must not reset the product")
		})
	}
	assert.Equal(t, int64(1), s.audit(t, existing).Orders, "a refused PUT must not delete orders")

	t.Run("bad sku syntax", func(t *testing.T) {
		for _, sku := range []string{"bad%20sku%21", strings.Repeat("a", 65), "%00"} {
			assertError(t, s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":1}`, admin),
				http.StatusBadRequest, "invalid_argument")
		}
	})
}

func TestAdminRequiresToken(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	before := s.putProduct(t, sku, 3, 1)

	auths := []struct {
		name   string
		header header
	}{
		{"missing header", nil},
		{"wrong token", header{"Authorization": "Bearer wrong-token"}},
		{"token with a suffix", header{"Authorization": "Bearer " + adminToken + "x"}},
		{"empty bearer token", header{"Authorization": "Bearer "}},
		{"basic scheme", header{"Authorization": "Basic dGVzdC10b2tlbjo="}},
		{"token without a scheme", header{"Authorization": adminToken}},
		{"other scheme with the right token", header{"Authorization": "Token " + adminToken}},
	}
	endpoints := []struct {
		name, method, target, body string
	}{
		{"PUT product", http.MethodPut, productPath(sku), `{"name":"hijacked","stock":1000}`},
		{"PUT new product", http.MethodPut, productPath(backendtest.SKU(t)), `{"name":"x","stock":1}`},
		{"GET audit", http.MethodGet, auditPath(sku), ""},
		{"GET locks", http.MethodGet, locksPath(sku), ""},
	}
	for _, e := range endpoints {
		for _, a := range auths {
			t.Run(e.name+"/"+a.name, func(t *testing.T) {
				rec := s.do(t, e.method, e.target, e.body, a.header)
				assertError(t, rec, http.StatusUnauthorized, "unauthenticated")
				assert.NotEmpty(t, rec.Header().Get("WWW-Authenticate"), "a 401 names its scheme")
			})
		}
	}
	assert.Equal(t, before, s.product(t, sku), "an unauthenticated PUT must not reset the product")
}

func TestNotFound(t *testing.T) {
	s := newServer(t)
	missing := backendtest.SKU(t)
	tests := []struct {
		name, method, target, body string
		header                     header
	}{
		{"GET unknown product", http.MethodGet, productPath(missing), "", nil},
		{"GET unknown product with a 64-character sku", http.MethodGet, productPath(strings.Repeat("z", 64)), "", nil},
		{"POST order for unknown product", http.MethodPost, ordersPath(missing), `{"user_id":"u-1"}`, nil},
		{"POST order for unknown product with dblock", http.MethodPost, ordersPath(missing), `{"user_id":"u-1","strategy":"dblock"}`, nil},
		{"audit of unknown product", http.MethodGet, auditPath(missing), "", admin},
		{"unknown order, well-formed ULID", http.MethodGet, orderPath(ulid.Make().String()), "", nil},
		{"unknown order, malformed id", http.MethodGet, orderPath("not-an-order-id"), "", nil},
		{"unknown order, lower-case ULID", http.MethodGet, orderPath(strings.ToLower(ulid.Make().String())), "", nil},
		{"unknown order, SQL in the id", http.MethodGet, orderPath("x'%20OR%20'1'='1"), "", nil},
		{"unknown route", http.MethodGet, "/api/v1/nope", "", nil},
		{"unknown route outside the API", http.MethodGet, "/nope", "", nil},
		{"unknown route with a body", http.MethodPost, "/api/v2/products/x/orders", `{"user_id":"u-1"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertError(t, s.do(t, tt.method, tt.target, tt.body, tt.header), http.StatusNotFound, "not_found")
		})
	}
	assertError(t, s.do(t, http.MethodGet, productPath(missing), "", nil), http.StatusNotFound, "not_found")
}

func TestPlaceOrder(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 10, 3)

	before := time.Now()
	rec := s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1001","quantity":1}`, nil)
	o := decode[contract.Order](t, rec, http.StatusCreated, orderFields)
	assert.Regexp(t, ulidPattern, o.OrderID)
	_, err := ulid.ParseStrict(o.OrderID)
	assert.NoError(t, err)
	assert.Equal(t, sku, o.SKU)
	assert.Equal(t, "u-1001", o.UserID)
	assert.Equal(t, 1, o.Quantity)
	assert.Equal(t, "hybrid", o.Strategy, "the configured default")
	assert.WithinDuration(t, before, o.CreatedAt, time.Minute)

	// created_at is RFC 3339 on the wire.
	var raw map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &raw))
	createdAt, ok := raw["created_at"].(string)
	require.True(t, ok, "created_at is a string")
	_, err = time.Parse(time.RFC3339, createdAt)
	assert.NoError(t, err, "created_at %q is not RFC 3339", createdAt)

	got := decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(o.OrderID), "", nil), http.StatusOK, orderFields)
	assert.True(t, o.CreatedAt.Equal(got.CreatedAt), "created_at %s != %s", o.CreatedAt, got.CreatedAt)
	got.CreatedAt = o.CreatedAt
	assert.Equal(t, o, got, "GET answers the order that POST created")

	t.Run("quantity above 1 within max_per_order", func(t *testing.T) {
		o := s.order(t, sku, `{"user_id":"u-1002","quantity":3}`, nil)
		assert.Equal(t, 3, o.Quantity)
	})
	t.Run("quantity defaults to 1", func(t *testing.T) {
		o := s.order(t, sku, `{"user_id":"u-1003"}`, nil)
		assert.Equal(t, 1, o.Quantity)
	})
	t.Run("strategy dblock is used and echoed", func(t *testing.T) {
		o := s.order(t, sku, `{"user_id":"u-1004","quantity":2,"strategy":"dblock"}`, nil)
		assert.Equal(t, "dblock", o.Strategy)
		got := decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(o.OrderID), "", nil), http.StatusOK, orderFields)
		assert.Equal(t, "dblock", got.Strategy)
	})
	t.Run("strategy pessimistic by name", func(t *testing.T) {
		o := s.order(t, sku, `{"user_id":"u-1005","strategy":"pessimistic"}`, nil)
		assert.Equal(t, "pessimistic", o.Strategy)
	})
	t.Run("user_id of exactly 64 bytes", func(t *testing.T) {
		id := strings.Repeat("é", 32) // 64 bytes, 32 characters
		o := s.order(t, sku, `{"user_id":"`+id+`"}`, nil)
		assert.Equal(t, id, o.UserID)
	})

	p := s.product(t, sku)
	assert.Equal(t, int64(10), p.InitialStock)
	assert.Equal(t, int64(1), p.Stock)
	assert.Equal(t, int64(9), p.Sold)

	a := s.audit(t, sku)
	redisStock, zero, heldBack := int64(4), int64(0), int64(0) // warmed by the PUT with 10; only hybrid orders (6 units) move the admission counter
	assert.Equal(t, contract.Audit{
		SKU: sku, InitialStock: 10, Stock: 1, OrderedQuantity: 9, Orders: 6, DistinctBuyers: 6, Oversold: 0, Consistent: true,
		RedisStock: &redisStock, RedisReservations: &zero, RedisReserved: &zero, HeldBack: &heldBack, Queued: &zero,
	}, a, "no reservation is left in flight; admission offers more than the database has (4 > 1: dblock and pessimistic sold 3 units it never saw), so it holds nothing back")
}

func TestBodyLimitBoundary(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 2, 1)
	body := `{"user_id":"u-1"}`
	exact := strings.Repeat(" ", 4096-len(body)) + body
	require.Len(t, exact, 4096)
	s.order(t, sku, exact, nil)

	over := " " + exact
	assertError(t, s.do(t, http.MethodPost, ordersPath(sku), strings.Replace(over, "u-1", "u-2", 1), nil),
		http.StatusBadRequest, "invalid_argument")
	assert.Equal(t, int64(1), s.product(t, sku).Stock)
}

func TestPlaceOrderInvalid(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	const units = 5
	s.putProduct(t, sku, units, 1)

	valid := `{"user_id":"u-1"}`
	tests := []struct {
		name   string
		sku    string // path segment; empty: the test's product
		body   string
		header header
	}{
		{name: "malformed JSON", body: `{"user_id":`},
		{name: "JSON syntax error", body: `{user_id:"u-1"}`},
		{name: "empty body", body: ``},
		{name: "null", body: `null`},
		{name: "array", body: `[` + valid + `]`},
		{name: "string", body: `"u-1"`},
		{name: "number", body: `1`},
		{name: "trailing object", body: valid + `{"user_id":"u-2"}`},
		{name: "trailing garbage", body: valid + `x`},
		{name: "unknown field", body: `{"user_id":"u-1","qty":1}`},
		{name: "body over 4 KiB in user_id", body: `{"user_id":"` + strings.Repeat("u", 5000) + `"}`},
		{name: "body over 4 KiB of padding", body: strings.Repeat(" ", 5000) + valid},
		{name: "sku with space and bang", sku: "bad%20sku%21", body: valid},
		{name: "sku of 65 characters", sku: strings.Repeat("a", 65), body: valid},
		{name: "sku NUL", sku: "%00", body: valid},
		{name: "sku with unicode", sku: "%C3%A9", body: valid},
		{name: "quantity 0", body: `{"user_id":"u-1","quantity":0}`},
		{name: "quantity -1", body: `{"user_id":"u-1","quantity":-1}`},
		{name: "quantity above max_per_order", body: `{"user_id":"u-1","quantity":2}`},
		{name: "quantity above max_per_order with dblock", body: `{"user_id":"u-1","quantity":2,"strategy":"dblock"}`},
		{name: "quantity 1e30", body: `{"user_id":"u-1","quantity":1e30}`},
		{name: "quantity 1.5", body: `{"user_id":"u-1","quantity":1.5}`},
		{name: "quantity as a string", body: `{"user_id":"u-1","quantity":"1"}`},
		{name: "quantity 99999999999", body: `{"user_id":"u-1","quantity":99999999999}`},
		{name: "quantity beyond int64", body: `{"user_id":"u-1","quantity":99999999999999999999}`},
		{name: "quantity boolean", body: `{"user_id":"u-1","quantity":true}`},
		{name: "user_id missing", body: `{"quantity":1}`},
		{name: "user_id empty", body: `{"user_id":""}`},
		{name: "user_id 65 bytes", body: `{"user_id":"` + strings.Repeat("u", 65) + `"}`},
		{name: "user_id 33 two-byte characters", body: `{"user_id":"` + strings.Repeat("é", 33) + `"}`},
		{name: "user_id with an escaped control character", body: `{"user_id":"u\u0001"}`},
		{name: "user_id with an escaped NUL", body: `{"user_id":"u\u0000"}`},
		{name: "user_id with a raw control character", body: "{\"user_id\":\"u\x01\"}"},
		{name: "user_id with a newline", body: `{"user_id":"u\n1"}`},
		{name: "user_id with invalid UTF-8", body: "{\"user_id\":\"u\xff\"}"},
		{name: "invalid UTF-8 outside strings", body: "{\"user_id\":\"u-1\"}\xfe"},
		{name: "user_id null", body: `{"user_id":null}`},
		{name: "user_id number", body: `{"user_id":1001}`},
		{name: "user_id object", body: `{"user_id":{}}`},
		{name: "unknown strategy", body: `{"user_id":"u-1","strategy":"optimistic"}`},
		{name: "strategy in the wrong case", body: `{"user_id":"u-1","strategy":"DBLOCK"}`},
		{name: "strategy not a string", body: `{"user_id":"u-1","strategy":1}`},
		{name: "naive while unsafe is disallowed", body: `{"user_id":"u-1","strategy":"naive"}`},
		{name: "unguarded-redis while unsafe is disallowed", body: `{"user_id":"u-1","strategy":"unguarded-redis"}`},
		{name: "unguarded-etcd while unsafe is disallowed", body: `{"user_id":"u-1","strategy":"unguarded-etcd"}`},
		{name: "Idempotency-Key of 129 bytes", body: valid, header: header{"Idempotency-Key": strings.Repeat("k", 129)}},
		{name: "Idempotency-Key with a control character", body: valid, header: header{"Idempotency-Key": "key\x01"}},
		{name: "Idempotency-Key with DEL", body: valid, header: header{"Idempotency-Key": "key\x7f"}},
		{name: "Idempotency-Key with invalid UTF-8", body: valid, header: header{"Idempotency-Key": "key\xff"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := sku
			if tt.sku != "" {
				target = tt.sku
			}
			rec := s.do(t, http.MethodPost, ordersPath(target), tt.body, tt.header)
			assert.Less(t, rec.Code, 500, "a client's input must never cause a 5xx: %s", rec.Body)
			assertError(t, rec, http.StatusBadRequest, "invalid_argument")
			s.requireUntouched(t, sku, units)
		})
	}
}

func TestPlaceOrderConflicts(t *testing.T) {
	s := newServer(t)

	t.Run("sold_out", func(t *testing.T) {
		sku := backendtest.SKU(t)
		s.putProduct(t, sku, 2, 2)
		s.order(t, sku, `{"user_id":"u-1"}`, nil)
		assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-2","quantity":2}`, nil),
			http.StatusConflict, "sold_out")
		s.order(t, sku, `{"user_id":"u-2"}`, nil)
		for _, strategy := range []string{"pessimistic", "dblock"} {
			assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-3","strategy":"`+strategy+`"}`, nil),
				http.StatusConflict, "sold_out")
		}
		a := s.audit(t, sku)
		assert.Equal(t, int64(0), a.Stock)
		assert.Equal(t, int64(2), a.Orders)
		assert.True(t, a.Consistent)
	})

	t.Run("sold_out with zero stock", func(t *testing.T) {
		sku := backendtest.SKU(t)
		s.putProduct(t, sku, 0, 1)
		assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, nil), http.StatusConflict, "sold_out")
		s.requireUntouched(t, sku, 0)
	})

	t.Run("already_purchased", func(t *testing.T) {
		sku := backendtest.SKU(t)
		s.putProduct(t, sku, 5, 1)
		s.order(t, sku, `{"user_id":"u-1"}`, nil)
		for _, strategy := range []string{"pessimistic", "dblock"} {
			assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1","strategy":"`+strategy+`"}`, nil),
				http.StatusConflict, "already_purchased")
		}
		// A new Idempotency-Key does not make a second purchase.
		assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, header{"Idempotency-Key": backendtest.SKU(t)}),
			http.StatusConflict, "already_purchased")
		a := s.audit(t, sku)
		assert.Equal(t, int64(4), a.Stock, "the refused orders gave their stock back")
		assert.Equal(t, int64(1), a.Orders)
		assert.True(t, a.Consistent)
	})
}

// TestIdempotency is the Idempotency-Key under every safe strategy: a replay answers the
// original order and deducts nothing more; the key with any other request — another buyer,
// quantity, strategy or product — is idempotency_conflict, and no order of it ever exists, nor a
// unit held for it. Queued's first order is followed until it is placed: from then on it is
// answered 201, like the others. A key replayed across buyers (another buyer handed the first
// one's order, or queued accepting a second order that then waits for ever) fails here.
func TestIdempotency(t *testing.T) {
	for _, strategy := range []string{"hybrid", "etcd", "pessimistic", "dblock", "zookeeper", "queued"} {
		t.Run(strategy, func(t *testing.T) {
			cfg := service.Defaults()
			cfg.Strategy = strategy
			s := newServerOn(t, cfg, backendtest.Wiring{ZKServers: backendtest.ZooKeeperFor(t, strategy)})
			idempotency(t, s, strategy)
		})
	}
}

func idempotency(t *testing.T, s *server, strategy string) {
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 5, 2)
	key := header{"Idempotency-Key": "key-" + sku}
	body := `{"user_id":"u-1","quantity":2}`

	first := s.placed(t, sku, body, key)
	for range 2 {
		again := s.order(t, sku, body, key)
		assert.Equal(t, first.OrderID, again.OrderID, "a replay answers the original order")
		assert.Equal(t, first.Quantity, again.Quantity)
	}
	// The same request spelled differently (the strategy named, fields reordered) is the same request.
	again := s.order(t, sku, fmt.Sprintf(`{"quantity":2,"strategy":%q,"user_id":"u-1"}`, strategy), key)
	assert.Equal(t, first.OrderID, again.OrderID)

	p := s.product(t, sku)
	assert.Equal(t, int64(3), p.Stock, "a replay deducts nothing more")
	assert.Equal(t, int64(2), p.Sold)

	other := "dblock"
	if strategy == other {
		other = "hybrid"
	}
	conflicts := []struct {
		name, body string
	}{
		{"different user", `{"user_id":"u-2","quantity":2}`},
		{"different user and quantity", `{"user_id":"u-2","quantity":1}`},
		{"different quantity", `{"user_id":"u-1","quantity":1}`},
		{"different strategy", fmt.Sprintf(`{"user_id":"u-1","quantity":2,"strategy":%q}`, other)},
		{"a quantity over the product's limit", `{"user_id":"u-2","quantity":3}`},
	}
	for _, c := range conflicts {
		t.Run(c.name, func(t *testing.T) {
			for range 2 {
				rec := s.do(t, http.MethodPost, ordersPath(sku), c.body, key)
				assert.NotContains(t, rec.Body.String(), first.OrderID, "another request under the key was handed its order")
				assertError(t, rec, http.StatusConflict, "idempotency_conflict")
			}
		})
	}
	t.Run("different product", func(t *testing.T) {
		other := backendtest.SKU(t)
		s.putProduct(t, other, 5, 2)
		assertError(t, s.do(t, http.MethodPost, ordersPath(other), body, key), http.StatusConflict, "idempotency_conflict")
		assertError(t, s.do(t, http.MethodPost, ordersPath(other), `{"user_id":"u-2","quantity":2}`, key), http.StatusConflict, "idempotency_conflict")
		s.requireUntouched(t, other, 5)
		s.requireNothingHeld(t, other)
	})
	t.Run("unknown product", func(t *testing.T) {
		assertError(t, s.do(t, http.MethodPost, ordersPath(backendtest.SKU(t)), body, key), http.StatusConflict, "idempotency_conflict")
	})

	a := s.audit(t, sku)
	assert.Equal(t, int64(1), a.Orders, "no order of a conflicting request exists")
	assert.Equal(t, int64(3), a.Stock)
	assert.True(t, a.Consistent)
	s.requireNothingHeld(t, sku)
	// The other buyer was refused, not recorded: with a key of its own it buys.
	assert.NotEqual(t, first.OrderID, s.placed(t, sku, `{"user_id":"u-2","quantity":1}`, header{"Idempotency-Key": "key2-" + sku}).OrderID)

	t.Run("Idempotency-Key of 128 bytes", func(t *testing.T) {
		long := header{"Idempotency-Key": strings.Repeat("k", 128-len(sku)) + sku}
		o := s.placed(t, sku, `{"user_id":"u-3"}`, long)
		assert.Equal(t, o.OrderID, s.order(t, sku, `{"user_id":"u-3"}`, long).OrderID)
	})
}

// placed places an order that must be accepted, and follows a queued one (202) until it is
// placed, so that the caller sees the order as every strategy's 201 shows it.
func (s *server) placed(t *testing.T, sku, body string, h header) contract.Order {
	t.Helper()
	rec := s.do(t, http.MethodPost, ordersPath(sku), body, h)
	if rec.Code != http.StatusAccepted {
		return decode[contract.Order](t, rec, http.StatusCreated, orderFields)
	}
	o := decode[contract.Order](t, rec, http.StatusAccepted, orderFields)
	o = decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(o.OrderID)+"?wait=10s", "", nil), http.StatusOK, orderFields)
	require.Equal(t, "confirmed", o.Status, "the queued order was placed: %+v", o)
	return o
}

// requireNothingHeld checks that Redis admission holds no reservation of sku and nothing back,
// and that no order of it waits in the queue: every refused request left nothing behind.
func (s *server) requireNothingHeld(t *testing.T, sku string) {
	t.Helper()
	a := s.audit(t, sku)
	if a.RedisReservations != nil {
		assert.Zero(t, *a.RedisReservations, "reservations left: %+v", a)
	}
	if a.HeldBack != nil {
		assert.Zero(t, *a.HeldBack, "units held back: %+v", a)
	}
	if a.Queued != nil {
		assert.Zero(t, *a.Queued, "orders queued: %+v", a)
	}
}

func TestBusy(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	const units = 3
	s.putProduct(t, sku, units, 1)

	// Another holder takes the dblock lock of the SKU, as a slow instance would.
	ctx := context.Background()
	lock, holder := "products/"+sku, "other-holder-"+sku
	ok, err := s.store.TryLock(ctx, lock, holder, time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "the lock is free before the test")
	unlock := func() {
		_, err := s.store.Unlock(ctx, lock, holder)
		assert.NoError(t, err)
	}
	t.Cleanup(unlock)

	rec := s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1","strategy":"dblock"}`, nil)
	assertError(t, rec, http.StatusTooManyRequests, "busy")
	assertRetryAfter(t, rec)
	s.requireUntouched(t, sku, units)

	// Once the holder lets go, the same request goes through.
	unlock()
	o := s.order(t, sku, `{"user_id":"u-1","strategy":"dblock"}`, nil)
	assert.Equal(t, "dblock", o.Strategy)
	assert.Equal(t, int64(units-1), s.product(t, sku).Stock)
}

func TestReadiness(t *testing.T) {
	s := newServer(t)
	redis := "redis " + backendtest.RedisAddr(t)

	t.Run("ready", func(t *testing.T) {
		rec := s.do(t, http.MethodGet, "/readyz", "", nil)
		body := decode[map[string]any](t, rec, http.StatusOK, []string{"backends"})
		assert.Equal(t, map[string]any{"database": "ok", redis: "ok", "etcd": "ok", "nats": "ok"}, body["backends"])
	})

	t.Run("a backend is down", func(t *testing.T) {
		// A Redis that refuses every connection, as one that went away would.
		h := newServerOn(t, service.Defaults(), backendtest.Wiring{Store: s.store, RedisAddrs: []string{"127.0.0.1:1"}})

		rec := h.do(t, http.MethodGet, "/readyz", "", nil)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "body: %s", rec.Body)
		assertRetryAfter(t, rec)
		var body struct {
			Error    json.RawMessage   `json:"error"`
			Backends map[string]string `json:"backends"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "body: %s", rec.Body)
		message := assertErrorDetail(t, body.Error, "unavailable")
		assert.Contains(t, message, "127.0.0.1:1", "the message names the backend that is down")
		assert.NotContains(t, message, "database", "the message names only the backend that is down")
		assert.Equal(t, map[string]string{"database": "ok", "redis 127.0.0.1:1": "down", "etcd": "ok", "nats": "ok"}, body.Backends)
	})
}

// TestInternalError drives a real 500: a handler whose store has been closed fails with an error
// that no entry of the error table matches. The client must see "internal", never the cause.
func TestInternalError(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 1, 1)

	closed := backendtest.Store(t)
	require.NoError(t, closed.Close())
	h := newServerOn(t, service.Defaults(), backendtest.Wiring{Store: closed})

	const id = "req-internal-1"
	for _, req := range []struct{ method, target, body string }{
		{http.MethodGet, productPath(sku), ""},
		{http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`},
	} {
		t.Run(req.method, func(t *testing.T) {
			rec := h.do(t, req.method, req.target, req.body, header{"X-Request-Id": id})
			message := assertError(t, rec, http.StatusInternalServerError, "internal")
			assert.Contains(t, message, id, "the message carries the request id to quote to operators")
			for _, leak := range []string{"sql", "closed", "database", sku} {
				assert.NotContains(t, strings.ToLower(message), leak, "internal details leaked")
			}
		})
	}
	s.requireUntouched(t, sku, 1)
}

// TestClientGone places an order for a client that has already gone away: that is the client's
// doing, so it must not count as a server error (no 5xx), and nothing may be sold to nobody.
func TestClientGone(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 5, 1)
	for _, strategy := range []string{"pessimistic", "dblock"} {
		t.Run(strategy, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, ordersPath(sku),
				strings.NewReader(`{"user_id":"gone","strategy":"`+strategy+`"}`))
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			assertError(t, rec, 499, "canceled")
			s.requireUntouched(t, sku, 5)
		})
	}
}

func TestServiceEndpoints(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 5, 1)
	s.order(t, sku, `{"user_id":"u-1"}`, nil)
	assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, nil), http.StatusConflict, "already_purchased")
	assertError(t, s.do(t, http.MethodGet, "/no/such/"+sku, "", nil), http.StatusNotFound, "not_found")

	t.Run("method not allowed keeps the error shape", func(t *testing.T) {
		rec := s.do(t, http.MethodDelete, productPath(sku), "", admin)
		assertError(t, rec, http.StatusMethodNotAllowed, "method_not_allowed")
		assert.Equal(t, "GET, PUT", rec.Header().Get("Allow"))
		assert.Equal(t, int64(4), s.product(t, sku).Stock)
	})

	t.Run("healthz", func(t *testing.T) {
		rec := s.do(t, http.MethodGet, "/healthz", "", nil)
		assert.Equal(t, http.StatusOK, rec.Code)
	})

	t.Run("metrics", func(t *testing.T) {
		rec := s.do(t, http.MethodGet, "/metrics", "", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Contains(t, rec.Header().Get("Content-Type"), "text/plain")
		text := rec.Body.String()
		assert.Contains(t, text, "seckill_http_requests_total")
		assert.Contains(t, text, "seckill_orders_total")
		assert.Contains(t, text, `seckill_orders_total{outcome="ok",strategy="hybrid"} 1`)
		assert.Contains(t, text, `seckill_orders_total{outcome="already_purchased",strategy="hybrid"} 1`)
		// Routes are labelled by template, never by raw path: label cardinality stays bounded.
		// (A SKU is a label only of the admission gauges, for the products on sale now.)
		assert.Contains(t, text, `route="/api/v1/products/:sku/orders"`)
		assert.Contains(t, text, `route="unmatched"`)
		assert.NotContains(t, text, `route="/api/v1/products/`+sku)
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, sku) {
				assert.True(t, strings.HasPrefix(line, "seckill_admission_held_back_units{") || strings.HasPrefix(line, "seckill_admission_stranded_units{"),
					"only the admission gauges name a product: %s", line)
			}
		}
	})
}

func TestRequestID(t *testing.T) {
	s := newServer(t)
	tests := []struct {
		name   string
		sent   string // "" sends no header
		echoed bool
	}{
		{"sane id is echoed", "req-42.a:b_C", true},
		{"64 characters are echoed", strings.Repeat("r", 64), true},
		{"absent id is generated", "", false},
		{"id with a space is replaced", "req 42", false},
		{"id with a newline escape is replaced", "req\\n42", false},
		{"id over 64 characters is replaced", strings.Repeat("r", 65), false},
		{"non-ASCII id is replaced", "réq", false},
		{"id with a control character is replaced", "req\x01", false},
	}
	for _, tt := range tests {
		for _, target := range []string{"/healthz", "/api/v1/nope"} {
			t.Run(tt.name+target, func(t *testing.T) {
				var h header
				if tt.sent != "" {
					h = header{"X-Request-Id": tt.sent}
				}
				got := s.do(t, http.MethodGet, target, "", h).Header().Get("X-Request-Id")
				if tt.echoed {
					assert.Equal(t, tt.sent, got)
					return
				}
				assert.NotEqual(t, tt.sent, got)
				assert.Regexp(t, ulidPattern, got, "a generated id is a ULID")
			})
		}
	}
	a := s.do(t, http.MethodGet, "/healthz", "", nil).Header().Get("X-Request-Id")
	b := s.do(t, http.MethodGet, "/healthz", "", nil).Header().Get("X-Request-Id")
	assert.NotEqual(t, a, b, "every request gets its own id")
}

// TestRedisAdmissionState: a product PUT warms Redis admission, the audit reports its counter,
// hybrid orders move it, and reconcile rebuilds it from the database after it drifted.
func TestRedisAdmissionState(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 3, 1)
	a := s.audit(t, sku)
	require.NotNil(t, a.RedisStock, "the reset warmed the admission counter")
	assert.EqualValues(t, 3, *a.RedisStock)

	s.order(t, sku, `{"user_id":"u-1","strategy":"hybrid"}`, nil)
	a = s.audit(t, sku)
	require.NotNil(t, a.RedisStock)
	assert.EqualValues(t, 2, *a.RedisStock)
	assert.True(t, a.Consistent)

	// The counter drifts low (a give-back lost while Redis was down): admission refuses buyers
	// the database could serve, until reconcile rebuilds it.
	rdb := backendtest.Redis(t)
	require.NoError(t, rdb.Set(context.Background(), "seckill:{"+sku+"}:stock", 0, 0).Err())
	assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-2","strategy":"hybrid"}`, nil), http.StatusConflict, "sold_out")
	a = s.audit(t, sku)
	require.NotNil(t, a.HeldBack)
	assert.EqualValues(t, 2, *a.HeldBack, "the audit shows the units the database has that admission holds back")
	assertError(t, s.do(t, http.MethodPost, reconcilePath(sku), "", nil), http.StatusUnauthorized, "unauthenticated")
	rec := decode[contract.Audit](t, s.do(t, http.MethodPost, reconcilePath(sku), "", admin), http.StatusOK, auditFields)
	require.NotNil(t, rec.RedisStock)
	assert.EqualValues(t, 2, *rec.RedisStock, "rebuilt from the database")
	s.order(t, sku, `{"user_id":"u-2","strategy":"hybrid"}`, nil)
	assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1","strategy":"hybrid"}`, nil), http.StatusConflict, "already_purchased")
	assertError(t, s.do(t, http.MethodPost, reconcilePath("no-such-sku"), "", admin), http.StatusNotFound, "not_found")
}

// TestResetNeedsRedis: with Redis unreachable a product reset answers 503 and changes nothing —
// going on would leave the old round's admission counter alive in Redis — while orders still
// succeed through the database-guarded fallback.
func TestResetNeedsRedis(t *testing.T) {
	up := newServer(t)
	sku := backendtest.SKU(t)
	up.putProduct(t, sku, 5, 1)

	down := newServerOn(t, service.Defaults(), backendtest.Wiring{Store: up.store, RedisAddrs: []string{"127.0.0.1:1"}})
	rec := down.do(t, http.MethodPut, productPath(sku), `{"name":"reset","stock":50}`, admin)
	assertError(t, rec, http.StatusServiceUnavailable, "unavailable")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	fresh := backendtest.SKU(t)
	assertError(t, down.do(t, http.MethodPut, productPath(fresh), `{"name":"new","stock":5}`, admin), http.StatusServiceUnavailable, "unavailable")
	assertError(t, down.do(t, http.MethodGet, productPath(fresh), "", nil), http.StatusNotFound, "not_found")
	assert.EqualValues(t, 5, down.product(t, sku).Stock, "the failed reset changed nothing")

	o := down.order(t, sku, `{"user_id":"u-1","strategy":"hybrid"}`, nil)
	assert.Equal(t, "hybrid", o.Strategy)
	a := down.audit(t, sku)
	assert.Nil(t, a.RedisStock, "no counter to report while Redis is down")
	assert.True(t, a.Consistent)
}

func reconcilePath(sku string) string { return "/api/v1/products/" + sku + "/reconcile" }

// TestRateLimit: with a per-client token bucket, a client over its budget hears 429
// rate_limited with Retry-After, others do not, and a spoofed X-Forwarded-For changes nothing
// unless the proxy is trusted.
func TestRateLimit(t *testing.T) {
	store := backendtest.Store(t)
	sku := backendtest.SKU(t)
	build := func(trusted []string) http.Handler {
		return newServerOn(t, service.Defaults(), backendtest.Wiring{Store: store}, func(c *app.Config) {
			c.RateLimit, c.RateBurst = 1, 2
			c.TrustedProxies = trusted
		})
	}
	get := func(h http.Handler, remote, forwarded string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, productPath(sku), nil)
		req.RemoteAddr = remote
		if forwarded != "" {
			req.Header.Set("X-Forwarded-For", forwarded)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	h := build(nil)
	for range 2 {
		assert.Equal(t, http.StatusNotFound, get(h, "10.0.0.1:1000", "").Code, "within the burst")
	}
	rec := get(h, "10.0.0.1:1000", "")
	assertError(t, rec, http.StatusTooManyRequests, "rate_limited")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assertError(t, get(h, "10.0.0.1:1000", "10.9.9.9"), http.StatusTooManyRequests, "rate_limited")
	assert.Equal(t, http.StatusNotFound, get(h, "10.0.0.2:1000", "").Code, "another client has its own bucket")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusOK, rec.Code, "service endpoints are not limited")

	behindProxy := build([]string{"10.0.0.0/24"})
	for i := range 3 {
		assert.Equal(t, http.StatusNotFound, get(behindProxy, "10.0.0.1:1000", fmt.Sprintf("192.0.2.%d", i)).Code,
			"behind a trusted proxy each forwarded client has its own bucket")
	}
	_, err := handler.New(handler.Config{TrustedProxies: []string{"not an address"}, Registerer: prometheus.NewRegistry()})
	assert.Error(t, err)
}

// TestDatabaseRestart stops the database in the middle of a sale (a MariaDB of the test's own)
// and starts it again: while it is down every answer that needs it is 503 unavailable with
// Retry-After, never a 500 and never a lost order; when it is back the service recovers by itself
// and the sale completes with the invariant intact. It runs with one order per critical section
// and with group commit.
func TestDatabaseRestart(t *testing.T) {
	for name, batch := range map[string]int{"default": service.Defaults().GroupCommit, "one-per-section": 1} {
		t.Run(name, func(t *testing.T) { databaseRestart(t, batch) })
	}
}

func databaseRestart(t *testing.T, batch int) {
	ctx := context.Background()
	mdb := backendtest.StartMariaDB(t)
	cfg := service.Defaults()
	cfg.GroupCommit = batch
	s := newServerOn(t, cfg, backendtest.Wiring{}, func(c *app.Config) { c.MySQLDSN = mdb.DSN })
	store := s.store
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 10, 1)

	var acked []stock.Order
	buy := func(user, strategy string) *httptest.ResponseRecorder {
		rec := s.do(t, http.MethodPost, ordersPath(sku), fmt.Sprintf(`{"user_id":%q,"strategy":%q}`, user, strategy),
			header{"Idempotency-Key": sku + "/" + user})
		if rec.Code == http.StatusCreated {
			var o contract.Order
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &o))
			acked = append(acked, stock.Order{OrderID: o.OrderID, UserID: o.UserID})
		}
		return rec
	}
	for i := range 4 {
		require.Equal(t, http.StatusCreated, buy(fmt.Sprintf("before-%d", i), []string{"pessimistic", "hybrid"}[i%2]).Code)
	}

	mdb.Stop()
	for i, strategy := range []string{"pessimistic", "hybrid", "dblock"} {
		rec := buy(fmt.Sprintf("down-%d", i), strategy)
		assertError(t, rec, http.StatusServiceUnavailable, "unavailable")
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	}
	assertError(t, s.do(t, http.MethodGet, productPath(sku), "", nil), http.StatusServiceUnavailable, "unavailable")
	ready := s.do(t, http.MethodGet, "/readyz", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, ready.Code)
	assert.Contains(t, ready.Body.String(), `"database":"down"`)

	mdb.Start()
	require.Eventually(t, func() bool {
		return s.do(t, http.MethodGet, "/readyz", "", nil).Code == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "the service recovers by itself")
	for i := range 10 {
		rec := buy(fmt.Sprintf("down-%d", i), []string{"pessimistic", "hybrid", "dblock"}[i%3])
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, rec.Code, "after the restart: %s", rec.Body)
	}
	a, err := store.Audit(ctx, sku)
	require.NoError(t, err)
	assert.True(t, a.Consistent(), "%+v", a)
	assert.Zero(t, a.Stock, "the sale completed")
	assert.Equal(t, int64(len(acked)), a.Orders, "every 201 has its order, no order without a 201")
	for _, o := range acked {
		got, err := store.Order(ctx, o.OrderID)
		require.NoError(t, err)
		assert.Equal(t, o.UserID, got.UserID)
	}
}

// TestKeyInFlight: a repeat of a request whose original is still inside its section, on another
// instance, is the client's to retry — 429 busy with Retry-After once the wait for the original
// runs out, never already_purchased and never a 5xx — and once the original has settled (its
// section is let go when the repeat has been answered), the repeat answers it.
func TestKeyInFlight(t *testing.T) {
	hooks, inside, release := backendtest.HoldSection("u-1")
	defer release()
	cfg := service.Defaults()
	cfg.Hooks = hooks
	holding := newServerOn(t, cfg, backendtest.Wiring{})
	other := newServer(t)
	sku := backendtest.SKU(t)
	other.putProduct(t, sku, 5, 1)
	key := header{"Idempotency-Key": sku + "/u-1"}

	original := make(chan contract.Order, 1)
	go func() {
		rec := holding.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, key)
		var o contract.Order
		assert.Equal(t, http.StatusCreated, rec.Code, "body: %s", rec.Body)
		assert.NoError(t, json.Unmarshal(rec.Body.Bytes(), &o))
		original <- o
	}()
	<-inside
	rec := other.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, key)
	message := assertError(t, rec, http.StatusTooManyRequests, "busy")
	assertRetryAfter(t, rec)
	assert.Contains(t, message, "in flight")
	release()
	o := <-original
	assert.Equal(t, o.OrderID, other.order(t, sku, `{"user_id":"u-1"}`, key).OrderID, "the retry answers the original order")
}

// TestOpenAPIStrategies: the contract's strategy enum is every strategy an instance with every
// backend (etcd and ZooKeeper too) offers, and no other.
func TestOpenAPIStrategies(t *testing.T) {
	inst := backendtest.NewInstance(t, service.Defaults(), backendtest.Wiring{ZKServers: backendtest.ZooKeeperServers(t)})
	rec := httptest.NewRecorder()
	inst.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var doc struct {
		Components struct {
			Schemas struct {
				OrderRequest struct {
					Properties struct {
						Strategy struct {
							Enum []string `yaml:"enum"`
						} `yaml:"strategy"`
					} `yaml:"properties"`
				} `yaml:"OrderRequest"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(rec.Body.Bytes(), &doc))
	assert.ElementsMatch(t, inst.Service.Names(), doc.Components.Schemas.OrderRequest.Properties.Strategy.Enum)
}
