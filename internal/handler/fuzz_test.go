package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/flashsale/seckill/internal/backendtest"
)

// fuzzServer is one handler over a real store with a product on sale, shared by a fuzz target's
// inputs (a fuzz run executes many inputs; each must leave the sale consistent).
func fuzzServer(f *testing.F) (*server, string) {
	f.Helper()
	s := newServer(f)
	return s, s.fuzzProduct(f)
}

// fuzzProduct puts a fresh product on sale for a fuzz target, and returns its SKU.
func (s *server) fuzzProduct(f *testing.F) string {
	f.Helper()
	sku := backendtest.SKU(f)
	req := httptest.NewRequest(http.MethodPut, productPath(sku), strings.NewReader(`{"name":"fuzz","stock":1000000,"max_per_order":3}`))
	req.Header.Set("Authorization", admin["Authorization"])
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		f.Fatalf("put product: %d %s", rec.Code, rec.Body)
	}
	return sku
}

// checkAnswer is what every answer must be, whatever the input: never a 5xx, always JSON, and an
// error always in the shape of the contract (openapi.yaml).
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("a client's input caused %d: %s", rec.Code, rec.Body)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %d is not JSON: %q", rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var e struct{ Code, Message string }
		if err := json.Unmarshal(body["error"], &e); err != nil || e.Code == "" || e.Message == "" || len(body) != 1 {
			t.Fatalf("answer %d is not the error shape: %s", rec.Code, rec.Body)
		}
	}
}

// FuzzPlaceOrder throws arbitrary SKUs, bodies and Idempotency-Keys at the order endpoint. Its seed
// corpus is the malformed-input table of TestPlaceOrderInvalid plus valid orders.
func FuzzPlaceOrder(f *testing.F) {
	s, sku := fuzzServer(f)
	for _, seed := range []struct{ sku, body, key string }{
		{sku, `{"user_id":"u-1"}`, ""},
		{sku, `{"user_id":"u-2","quantity":3,"strategy":"dblock"}`, "k-1"},
		{sku, `{"user_id":"u-3","strategy":"hybrid"}`, "k-2"},
		{sku, `{"user_id":"u-4","strategy":"etcd"}`, ""},
		{sku, `{"user_id":`, ""},
		{sku, `null`, ""},
		{sku, `[{"user_id":"u"}]`, ""},
		{sku, `{"user_id":"u"}{"user_id":"v"}`, ""},
		{sku, `{"user_id":"u","qty":1}`, ""},
		{sku, `{"user_id":"u","quantity":1e30}`, ""},
		{sku, `{"user_id":"u","quantity":"1"}`, ""},
		{sku, `{"user_id":"u","quantity":-1}`, ""},
		{sku, `{"user_id":"u\u0000"}`, ""},
		{sku, "{\"user_id\":\"u\xff\"}", ""},
		{sku, `{"user_id":"` + strings.Repeat("u", 65) + `"}`, ""},
		{sku, `{"user_id":"u","strategy":"naive"}`, ""},
		{sku, `{"user_id":"u"}`, strings.Repeat("k", 129)},
		{sku, `{"user_id":"u"}`, "k\x01"},
		{"bad sku!", `{"user_id":"u"}`, ""},
		{strings.Repeat("a", 65), `{"user_id":"u"}`, ""},
		{"no-such-product", `{"user_id":"u"}`, ""},
	} {
		f.Add(seed.sku, []byte(seed.body), seed.key)
	}
	f.Fuzz(func(t *testing.T, target string, body []byte, key string) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/products/"+url.PathEscape(target)+"/orders", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" && !strings.ContainsAny(key, "\r\n") {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
	a, err := s.store.Audit(context.Background(), sku)
	if err != nil || !a.Consistent() {
		f.Fatalf("the fuzzed sale is inconsistent: %+v %v", a, err)
	}
}

// FuzzPlaceCheckout throws arbitrary bodies and Idempotency-Keys at the checkout endpoint, over
// two products on sale: never a 5xx, and at the end both consistent and every checkout in one
// status (one line or two: the fuzzer writes both).
func FuzzPlaceCheckout(f *testing.F) {
	s, a := fuzzServer(f)
	b := s.fuzzProduct(f)
	line := func(sku string, quantity int) string {
		return `{"sku":"` + sku + `","quantity":` + strconv.Itoa(quantity) + `}`
	}
	for _, seed := range []struct{ body, key string }{
		{`{"user_id":"u-1","lines":[` + line(a, 1) + `,` + line(b, 2) + `]}`, ""},
		{`{"user_id":"u-2","lines":[` + line(b, 1) + `,` + line(a, 3) + `],"strategy":"pessimistic"}`, "k-1"},
		{`{"user_id":"u-3","lines":[` + line(a, 1) + `,` + line(b, 1) + `],"strategy":"etcd"}`, "k-2"},
		{`{"user_id":"u-4","lines":[` + line(a, 4) + `,` + line(b, 1) + `]}`, ""},
		{`{"user_id":"u-5","lines":[` + line(a, 1) + `,` + line(a, 1) + `]}`, ""},
		{`{"user_id":"u-6","lines":[` + line(a, 1) + `,` + line("no-such-product", 1) + `]}`, ""},
		{`{"user_id":"u-7","lines":[]}`, ""},
		{`{"user_id":"u-10","lines":[` + line(b, 1) + `]}`, ""},
		{`{"user_id":"u-8","lines":[{"sku":"` + a + `","quantity":"1"}]}`, ""},
		{`{"user_id":"u-9","lines":{"sku":"` + a + `"}}`, ""},
		{`{"user_id":"u","lines":[` + line(a, 1) + `],"coupon":1}`, ""},
		{`{"lines":[` + line(a, 1) + `]}`, ""},
		{`{"user_id":"u","lines":[{"sku":"bad sku!"}]}`, ""},
		{`{"user_id":"u","lines":[` + line(a, 1) + `]}`, "k\x01"},
		{`null`, ""},
	} {
		f.Add([]byte(seed.body), seed.key)
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/checkouts", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" && !strings.ContainsAny(key, "\r\n") {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
	for _, sku := range []string{a, b} {
		if audit, err := s.store.Audit(context.Background(), sku); err != nil || !audit.Consistent() {
			f.Fatalf("the fuzzed sale of %s is inconsistent: %+v %v", sku, audit, err)
		}
	}
	if partial := backendtest.PartialCheckouts(f, backendtest.SQL(f), []string{a, b}, nil); len(partial) > 0 {
		f.Fatalf("half a checkout: %v", partial)
	}
}

// FuzzPutProduct throws arbitrary product bodies at the admin endpoint.
func FuzzPutProduct(f *testing.F) {
	s := newServer(f)
	sku := backendtest.SKU(f)
	for _, body := range []string{
		`{"name":"x","stock":10}`, `{"name":"x","stock":10,"max_per_order":2}`, `{"stock":10}`, `{"name":"x"}`,
		`{"name":"x","stock":-1}`, `{"name":"x","stock":1.5}`, `{"name":"x","stock":"10"}`, `{"name":"","stock":1}`,
		`{"name":"x","stock":10,"max_per_order":0}`, `{"name":"x","stock":10,"price":1}`, `{"name":"x",`, ``, `null`,
		"{\"name\":\"a\xffb\",\"stock\":1}", `{"name":"x","stock":99999999999999999999}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPut, productPath(sku), bytes.NewReader(body))
		req.Header.Set("Authorization", admin["Authorization"])
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
}
