package handler_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/backendtest"
)

func payPath(id string) string    { return "/api/v1/orders/" + id + "/pay" }
func cancelPath(id string) string { return "/api/v1/orders/" + id + "/cancel" }

// putSale puts a product on sale with a body of the test's own (window, payment timeout).
func (s *server) putSale(t *testing.T, sku string, body map[string]any) productResponse {
	t.Helper()
	body["name"] = "Product " + sku
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	return decode[productResponse](t, s.do(t, http.MethodPut, productPath(sku), string(raw), admin), http.StatusOK, productFields)
}

// TestPayAndCancel walks the order's states through the API: a new order of a product with a
// payment timeout is pending with its deadline; paying confirms it (twice is fine); cancelling
// gives the unit back (twice is fine, once returned); a cancelled order cannot be paid; another
// user's or an unknown order is not found; the admin may cancel any order without a body; after
// a cancel the buyer may buy again.
func TestPayAndCancel(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	p := s.putSale(t, sku, map[string]any{"stock": 3, "payment_timeout_s": 900})
	assert.Equal(t, 900, p.PaymentTimeoutS)

	key := header{"Idempotency-Key": sku + "/u-1"}
	o := s.order(t, sku, `{"user_id":"u-1"}`, key)
	assert.Equal(t, "pending", o.Status)
	require.NotNil(t, o.ExpiresAt)
	assert.WithinDuration(t, time.Now().Add(15*time.Minute), *o.ExpiresAt, time.Minute)

	assertError(t, s.do(t, http.MethodPost, payPath(o.OrderID), `{"user_id":"u-2"}`, nil), http.StatusNotFound, "not_found")
	for range 2 {
		paid := decode[contract.Order](t, s.do(t, http.MethodPost, payPath(o.OrderID), `{"user_id":"u-1"}`, nil), http.StatusOK, orderFields)
		assert.Equal(t, "confirmed", paid.Status)
		assert.Nil(t, paid.ExpiresAt)
	}
	got := decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(o.OrderID), "", nil), http.StatusOK, orderFields)
	assert.Equal(t, "confirmed", got.Status)

	for range 2 {
		c := decode[contract.Order](t, s.do(t, http.MethodPost, cancelPath(o.OrderID), `{"user_id":"u-1"}`, nil), http.StatusOK, orderFields)
		assert.Equal(t, "cancelled", c.Status)
	}
	assert.EqualValues(t, 3, s.product(t, sku).Stock, "the unit came back once")
	assertError(t, s.do(t, http.MethodPost, payPath(o.OrderID), `{"user_id":"u-1"}`, nil), http.StatusConflict, "order_cancelled")
	replay := s.order(t, sku, `{"user_id":"u-1"}`, key)
	assert.Equal(t, o.OrderID, replay.OrderID, "a retry of the original request answers the original order")
	assert.Equal(t, "cancelled", replay.Status, "with its current status")
	assert.EqualValues(t, 3, s.product(t, sku).Stock, "and buys nothing")

	again := s.order(t, sku, `{"user_id":"u-1"}`, nil)
	assert.NotEqual(t, o.OrderID, again.OrderID, "the buyer bought again: a new order")
	assertError(t, s.do(t, http.MethodPost, cancelPath(again.OrderID), "", header{"Authorization": "Bearer wrong"}), http.StatusUnauthorized, "unauthenticated")
	c := decode[contract.Order](t, s.do(t, http.MethodPost, cancelPath(again.OrderID), "", admin), http.StatusOK, orderFields)
	assert.Equal(t, "cancelled", c.Status, "the admin cancels any order, no body needed")

	a := s.audit(t, sku)
	assert.True(t, a.Consistent)
	assert.EqualValues(t, 3, a.Stock)
	assert.EqualValues(t, 0, a.Orders, "no active order left")

	unknown := "01M8R9XCTXVXMM49XG5XN5BGEF"
	for _, path := range []string{payPath(unknown), cancelPath(unknown), payPath("not-an-id"), cancelPath("not-an-id")} {
		assertError(t, s.do(t, http.MethodPost, path, `{"user_id":"u-1"}`, nil), http.StatusNotFound, "not_found")
	}
}

// TestPayAfterExpiry: an order unpaid past its deadline reads as expired at once; a late payment
// is refused (the classic oversell — restock, then the late payment succeeds — cannot happen)
// and so is a late cancel; the unit is back on sale.
func TestPayAfterExpiry(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putSale(t, sku, map[string]any{"stock": 2, "payment_timeout_s": 1})
	late := s.order(t, sku, `{"user_id":"late"}`, nil)
	other := s.order(t, sku, `{"user_id":"other"}`, nil)
	// The deadline is the database clock's: the later order reads expired once it has passed
	// there, and the earlier one's with it.
	require.Eventually(t, func() bool {
		var o contract.Order
		rec := s.do(t, http.MethodGet, orderPath(other.OrderID), "", nil)
		return rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &o) == nil && o.Status == "expired"
	}, 5*time.Second, 10*time.Millisecond, "the unpaid order never read as expired")
	got := decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(other.OrderID), "", nil), http.StatusOK, orderFields)
	assert.Equal(t, "expired", got.Status)
	assert.Nil(t, got.ExpiresAt)
	assertError(t, s.do(t, http.MethodPost, payPath(late.OrderID), `{"user_id":"late"}`, nil), http.StatusConflict, "order_expired")
	assertError(t, s.do(t, http.MethodPost, cancelPath(late.OrderID), `{"user_id":"late"}`, nil), http.StatusConflict, "order_expired")
	require.Eventually(t, func() bool { return s.product(t, sku).Stock == 2 }, 5*time.Second, 50*time.Millisecond,
		"both units back on sale within 5 s")
	s.order(t, sku, `{"user_id":"late"}`, nil)
	a := s.audit(t, sku)
	assert.True(t, a.Consistent)
	assert.EqualValues(t, 2, a.Expired)
}

// TestSaleWindow: before starts_at an order is refused with sale_not_started and a Retry-After
// of the seconds left; from starts_at it is taken; at ends_at and after it is sale_ended — but a
// retry of an order placed in the window still answers that order.
func TestSaleWindow(t *testing.T) {
	s := newServer(t)
	soon := backendtest.SKU(t)
	starts := time.Now().Add(90 * time.Second).Truncate(time.Second)
	p := s.putSale(t, soon, map[string]any{"stock": 1, "starts_at": starts.Format(time.RFC3339)})
	require.NotNil(t, p.StartsAt)
	assert.True(t, starts.Equal(*p.StartsAt))
	assert.Nil(t, p.EndsAt, "absent when unset")
	rec := s.do(t, http.MethodPost, ordersPath(soon), `{"user_id":"early"}`, nil)
	assertError(t, rec, http.StatusConflict, "sale_not_started")
	wait, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err)
	assert.InDelta(t, 90, wait, 2, "the seconds until the start, rounded up")
	s.requireUntouched(t, soon, 1)

	edge := backendtest.SKU(t)
	ends := time.Now().Add(1500 * time.Millisecond)
	s.putSale(t, edge, map[string]any{"stock": 5, "starts_at": time.Now().Add(-time.Second).Format(time.RFC3339Nano),
		"ends_at": ends.Format(time.RFC3339Nano)})
	key := header{"Idempotency-Key": edge + "/in-time"}
	in := s.order(t, edge, `{"user_id":"in-time"}`, key)
	time.Sleep(time.Until(ends) + 50*time.Millisecond) // the window must pass: its end is what is tested
	assertError(t, s.do(t, http.MethodPost, ordersPath(edge), `{"user_id":"too-late"}`, nil), http.StatusConflict, "sale_ended")
	assert.Equal(t, in.OrderID, s.order(t, edge, `{"user_id":"in-time"}`, key).OrderID, "a retry of an order placed in time")
	assert.EqualValues(t, 4, s.product(t, edge).Stock)
}

// TestLifecycleInvalid: malformed bodies of pay and cancel, and bad windows and timeouts on PUT,
// are 400 — never a 5xx, never a state change.
func TestLifecycleInvalid(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.putSale(t, sku, map[string]any{"stock": 2, "payment_timeout_s": 900})
	o := s.order(t, sku, `{"user_id":"u-1"}`, nil)
	for _, body := range []string{``, `{}`, `{"user_id":""}`, `{"user_id":1}`, `{"user_id":"u-1","extra":1}`, `[`, `{"user_id":"u\u0001"}`,
		`{"user_id":"` + string(make([]byte, 65)) + `"}`} {
		for _, path := range []string{payPath(o.OrderID), cancelPath(o.OrderID)} {
			rec := s.do(t, http.MethodPost, path, body, nil)
			assertError(t, rec, http.StatusBadRequest, "invalid_argument")
		}
	}
	got := decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(o.OrderID), "", nil), http.StatusOK, orderFields)
	assert.Equal(t, "pending", got.Status, "nothing changed")

	for name, body := range map[string]string{
		"ends before it starts":   `{"name":"x","stock":1,"starts_at":"2026-12-12T12:00:00Z","ends_at":"2026-12-12T11:00:00Z"}`,
		"ends when it starts":     `{"name":"x","stock":1,"starts_at":"2026-12-12T12:00:00Z","ends_at":"2026-12-12T12:00:00Z"}`,
		"not RFC 3339":            `{"name":"x","stock":1,"starts_at":"tomorrow"}`,
		"timeout negative":        `{"name":"x","stock":1,"payment_timeout_s":-1}`,
		"timeout over a day":      `{"name":"x","stock":1,"payment_timeout_s":86401}`,
		"timeout not an integer":  `{"name":"x","stock":1,"payment_timeout_s":1.5}`,
		"window start not string": `{"name":"x","stock":1,"starts_at":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			assertError(t, s.do(t, http.MethodPut, productPath(sku), body, admin), http.StatusBadRequest, "invalid_argument")
		})
	}
	assert.EqualValues(t, 1, s.product(t, sku).Stock, "no reset happened")
}
