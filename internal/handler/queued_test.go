package handler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
)

func decodeOrder(t *testing.T, body []byte) contract.Order {
	t.Helper()
	var o contract.Order
	require.NoError(t, json.Unmarshal(body, &o))
	return o
}

// TestQueuedOrderHTTP is the contract of queued orders: 202 with status queued and a Location;
// a repeat with the same Idempotency-Key answers the same order, 202 while it is queued and 201
// once it is placed; ?wait= holds the answer until a writer placed it; sold out is answered at
// once, never queued; the audit counts what is queued.
func TestQueuedOrderHTTP(t *testing.T) {
	cfg := service.Defaults()
	cfg.Strategy = "queued"
	// The writer's section holds the first order until the test has seen it queued.
	hooks, inside, release := backendtest.HoldSection("u-1")
	defer release()
	cfg.Hooks = hooks
	s := newServerOn(t, cfg, backendtest.Wiring{})
	sku := backendtest.SKU(t)
	require.Equal(t, http.StatusOK, s.do(t, http.MethodPut, productPath(sku), `{"name":"q","stock":1}`, admin).Code)

	key := header{"Idempotency-Key": "key-" + sku}
	rec := s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, key)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	o := decodeOrder(t, rec.Body.Bytes())
	assert.Equal(t, "queued", o.Status)
	assert.Equal(t, "queued", o.Strategy)
	assert.Equal(t, orderPath(o.OrderID), rec.Header().Get("Location"))
	<-inside

	rec = s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, key)
	require.Equal(t, http.StatusAccepted, rec.Code, "a repeat while queued: %s", rec.Body.String())
	assert.Equal(t, o.OrderID, decodeOrder(t, rec.Body.Bytes()).OrderID, "the same order")
	rec = s.do(t, http.MethodGet, orderPath(o.OrderID), "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "queued", decodeOrder(t, rec.Body.Bytes()).Status)
	var a contract.Audit
	rec = s.do(t, http.MethodGet, auditPath(sku), "", admin)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
	require.NotNil(t, a.Queued)
	assert.EqualValues(t, 1, *a.Queued)

	assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-2"}`, nil), http.StatusConflict, "sold_out")

	rec = s.do(t, http.MethodGet, orderPath(o.OrderID)+"?wait=200ms", "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "queued", decodeOrder(t, rec.Body.Bytes()).Status, "the wait passed: the order as it stands")

	waited := make(chan *httptest.ResponseRecorder, 1)
	go func() { waited <- s.do(t, http.MethodGet, orderPath(o.OrderID)+"?wait=10s", "", nil) }()
	release()
	rec = <-waited
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "confirmed", decodeOrder(t, rec.Body.Bytes()).Status, "held until the writer placed it")

	rec = s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, key)
	require.Equal(t, http.StatusCreated, rec.Code, "a repeat once placed: %s", rec.Body.String())
	assert.Equal(t, o.OrderID, decodeOrder(t, rec.Body.Bytes()).OrderID, "the same order")
	rec = s.do(t, http.MethodGet, auditPath(sku), "", admin)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
	assert.True(t, a.Consistent)
	assert.EqualValues(t, 1, a.Orders)
	assert.EqualValues(t, 0, *a.Queued)

	for _, bad := range []string{"soon", "-1s"} {
		assertError(t, s.do(t, http.MethodGet, orderPath(o.OrderID)+"?wait="+bad, "", nil), http.StatusBadRequest, "invalid_argument")
	}
	assertError(t, s.do(t, http.MethodGet, orderPath("01J00000000000000000000000")+"?wait=100ms", "", nil), http.StatusNotFound, "not_found")
}

// TestQueuedRejectedHTTP: an order the database cannot back — it had less than admission
// thought — reads as rejected, with the reason, and its unit is back on sale in admission.
func TestQueuedRejectedHTTP(t *testing.T) {
	cfg := service.Defaults()
	cfg.Strategy = "queued"
	s := newServerOn(t, cfg, backendtest.Wiring{})
	sku := backendtest.SKU(t)
	require.Equal(t, http.StatusOK, s.do(t, http.MethodPut, productPath(sku), `{"name":"q","stock":1}`, admin).Code)
	_, err := backendtest.SQL(t).ExecContext(context.Background(), "UPDATE products SET stock = 0, initial_stock = 0 WHERE sku = ?", sku)
	require.NoError(t, err)

	rec := s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, nil)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	id := decodeOrder(t, rec.Body.Bytes()).OrderID
	rec = s.do(t, http.MethodGet, orderPath(id)+"?wait=10s", "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	o := decodeOrder(t, rec.Body.Bytes())
	assert.Equal(t, "rejected", o.Status)
	assert.Equal(t, "sold_out", o.Reason)
	var a contract.Audit
	require.NoError(t, json.Unmarshal(s.do(t, http.MethodGet, auditPath(sku), "", admin).Body.Bytes(), &a))
	assert.True(t, a.Consistent)
	assert.Zero(t, a.Orders)
	require.NotNil(t, a.RedisReservations)
	assert.Zero(t, *a.RedisReservations, "the rejected order's reservation was given back")
}

// TestWaitOnAStoredOrder: with the queued strategy offered, a ?wait= on an order of another
// strategy, which the queue has no record of, answers the order's row at once — the queue is
// asked first, and its "no record" must not hold the answer for the wait.
func TestWaitOnAStoredOrder(t *testing.T) {
	cfg := service.Defaults()
	cfg.Strategy = "queued"
	s := newServerOn(t, cfg, backendtest.Wiring{})
	sku := backendtest.SKU(t)
	require.Equal(t, http.StatusOK, s.do(t, http.MethodPut, productPath(sku), `{"name":"q","stock":1}`, admin).Code)
	rec := s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1","strategy":"hybrid"}`, nil)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	id := decodeOrder(t, rec.Body.Bytes()).OrderID

	start := time.Now()
	rec = s.do(t, http.MethodGet, orderPath(id)+"?wait=10s", "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, id, decodeOrder(t, rec.Body.Bytes()).OrderID)
	assert.Less(t, time.Since(start), 2*time.Second, "answered at once, not after the wait")
	assert.Equal(t, http.StatusOK, s.do(t, http.MethodGet, orderPath(id), "", nil).Code)
}

// TestQueuedCheckoutHTTP is the contract of queued checkouts: 202 with status queued, its lines
// and a Location; a repeat under its Idempotency-Key answers the same checkout while it is
// queued, another body under that key is a conflict; its units are held at once (another buyer
// hears sold out); and it ends as one. Here the database disagrees with admission — another
// strategy sold the last unit of one product while the checkout waited in its writer's section —
// so the writer rejects the whole checkout (sold_out): no line is written, every line's unit
// goes back, and the other product sells again.
func TestQueuedCheckoutHTTP(t *testing.T) {
	cfg := service.Defaults()
	cfg.Strategy = "queued"
	hooks, inside, release := backendtest.HoldSection("u-1")
	defer release()
	cfg.Hooks = hooks
	s := newServerOn(t, cfg, backendtest.Wiring{})
	base := backendtest.SKU(t)
	a, b := base+"-a", base+"-b"
	s.putSale(t, a, map[string]any{"stock": 1})
	s.putSale(t, b, map[string]any{"stock": 1})

	key := header{"Idempotency-Key": "key-" + base}
	rec := s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-1", "", b, a), key)
	co := decode[contract.Checkout](t, rec, http.StatusAccepted, checkoutFields)
	assert.Equal(t, "queued", co.Status)
	assert.Equal(t, "queued", co.Strategy)
	assert.Equal(t, checkoutPath(co.CheckoutID), rec.Header().Get("Location"))
	require.Len(t, co.Lines, 2)
	assert.Equal(t, []string{a, b}, []string{co.Lines[0].SKU, co.Lines[1].SKU}, "lines in SKU order")
	<-inside

	again := decode[contract.Checkout](t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-1", "", a, b), key),
		http.StatusAccepted, checkoutFields)
	assert.Equal(t, co.CheckoutID, again.CheckoutID, "a repeat while queued answers the same checkout")
	assertError(t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-1", "", a), key), http.StatusConflict, "idempotency_conflict")
	read := decode[contract.Checkout](t, s.do(t, http.MethodGet, checkoutPath(co.CheckoutID)+"?wait=200ms", "", nil), http.StatusOK, checkoutFields)
	assert.Equal(t, "queued", read.Status, "the wait passed: the checkout as it stands")
	assert.Equal(t, co.Lines, read.Lines)
	assertCheckoutError(t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-2", "", a), nil), http.StatusConflict, "sold_out", a)

	// Another strategy, which asks no admission, sells b's last unit under the checkout.
	decode[contract.Order](t, s.do(t, http.MethodPost, ordersPath(b), `{"user_id":"u-2","strategy":"pessimistic"}`, nil), http.StatusCreated, orderFields)
	waited := make(chan *httptest.ResponseRecorder, 1)
	go func() { waited <- s.do(t, http.MethodGet, checkoutPath(co.CheckoutID)+"?wait=10s", "", nil) }()
	release()
	ended := decode[contract.Checkout](t, <-waited, http.StatusOK, checkoutFields)
	assert.Equal(t, "rejected", ended.Status, "held until the writer ended it: %+v", ended)
	assert.Equal(t, "sold_out", ended.Reason)
	for _, line := range co.Lines {
		assertError(t, s.do(t, http.MethodGet, orderPath(line.OrderID), "", nil), http.StatusNotFound, "not_found")
	}
	for _, sku := range []string{a, b} {
		assert.Eventually(t, func() bool {
			audit := s.audit(t, sku)
			return audit.Consistent && *audit.HeldBack == 0 && *audit.RedisReservations == 0 && *audit.Queued == 0
		}, 10*time.Second, 20*time.Millisecond, "%s: every line's reservation given back", sku)
	}
	assert.EqualValues(t, 1, s.product(t, a).Stock, "no line was written")
	bought := s.placedCheckout(t, checkoutBody("u-3", "", a), nil)
	assert.Equal(t, "confirmed", bought.Status, "a's unit is on sale again")
}
