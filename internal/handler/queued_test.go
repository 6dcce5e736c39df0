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
