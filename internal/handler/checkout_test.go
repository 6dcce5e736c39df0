package handler_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/backendtest"
)

const checkoutsPath = "/api/v1/checkouts"

var checkoutFields = []string{"checkout_id", "user_id", "strategy", "status", "created_at", "lines"}

func checkoutPath(id string) string { return checkoutsPath + "/" + id }

// checkoutBody is a checkout's body: user buys one unit of each of skus under strategy.
func checkoutBody(user, strategy string, skus ...string) string {
	lines := make([]string, len(skus))
	for i, sku := range skus {
		lines[i] = fmt.Sprintf(`{"sku":%q,"quantity":1}`, sku)
	}
	return fmt.Sprintf(`{"user_id":%q,"strategy":%q,"lines":[%s]}`, user, strategy, strings.Join(lines, ","))
}

// assertCheckoutError checks an error answer of a checkout: status, code, and the SKUs it names.
func assertCheckoutError(t *testing.T, rec *httptest.ResponseRecorder, status int, code string, skus ...string) {
	t.Helper()
	require.Equal(t, status, rec.Code, "body: %s", rec.Body)
	var body struct {
		Error map[string]any `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "body: %s", rec.Body)
	assert.Equal(t, []string{"code", "message", "skus"}, slices.Sorted(maps.Keys(body.Error)), "body: %s", rec.Body)
	assert.Equal(t, code, body.Error["code"], "body: %s", rec.Body)
	var named []string
	for _, s := range body.Error["skus"].([]any) {
		named = append(named, s.(string))
	}
	assert.Equal(t, skus, named, "body: %s", rec.Body)
}

// placedCheckout places a checkout that must be accepted, and follows a queued one (202, at its
// Location) until it is placed, so that the caller sees it as every strategy's 201 shows it.
func (s *server) placedCheckout(t *testing.T, body string, h header) contract.Checkout {
	t.Helper()
	rec := s.do(t, http.MethodPost, checkoutsPath, body, h)
	if rec.Code != http.StatusAccepted {
		return decode[contract.Checkout](t, rec, http.StatusCreated, checkoutFields)
	}
	co := decode[contract.Checkout](t, rec, http.StatusAccepted, checkoutFields)
	assert.Equal(t, "queued", co.Status)
	assert.Equal(t, checkoutPath(co.CheckoutID), rec.Header().Get("Location"))
	co = decode[contract.Checkout](t, s.do(t, http.MethodGet, checkoutPath(co.CheckoutID)+"?wait=10s", "", nil), http.StatusOK, checkoutFields)
	require.NotEqual(t, "queued", co.Status, "the queued checkout ended: %+v", co)
	return co
}

// TestCheckout walks a checkout through the API under every strategy this server offers that
// needs no backend of its own: every line placed at once (queued: accepted, then placed), in
// SKU order, with one deadline (the shortest payment timeout); a repeat with its key answers it,
// another body under that key is a conflict; a line short of stock, held already, or of an
// unknown product refuses the whole checkout, naming its SKU, and deducts nothing; a line's own
// payment pays the checkout; a cancel gives every line's unit back once.
func TestCheckout(t *testing.T) {
	s := newServer(t)
	for _, strategy := range []string{"hybrid", "pessimistic", "dblock", "etcd", "queued"} {
		t.Run(strategy, func(t *testing.T) {
			base := backendtest.SKU(t)
			a, b, c := base+"-a", base+"-b", base+"-c"
			s.putSale(t, a, map[string]any{"stock": 2, "payment_timeout_s": 900})
			s.putSale(t, b, map[string]any{"stock": 1, "payment_timeout_s": 600})
			s.putSale(t, c, map[string]any{"stock": 5})

			key := header{"Idempotency-Key": base + "/u-1"}
			co := s.placedCheckout(t, checkoutBody("u-1", strategy, b, a), key)
			assert.Regexp(t, ulidPattern, co.CheckoutID)
			assert.Equal(t, "pending", co.Status)
			require.NotNil(t, co.ExpiresAt)
			assert.WithinDuration(t, time.Now().Add(10*time.Minute), *co.ExpiresAt, time.Minute, "the shortest payment timeout of its products")
			require.Len(t, co.Lines, 2)
			assert.Equal(t, []string{a, b}, []string{co.Lines[0].SKU, co.Lines[1].SKU}, "lines in SKU order")
			line := decode[contract.Order](t, s.do(t, http.MethodGet, orderPath(co.Lines[1].OrderID), "", nil), http.StatusOK, orderFields)
			assert.Equal(t, co.CheckoutID, line.CheckoutID, "a line reads as an order of its checkout")
			assert.Equal(t, "pending", line.Status)

			again := decode[contract.Checkout](t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-1", strategy, a, b), key),
				http.StatusCreated, checkoutFields)
			assert.Equal(t, co.CheckoutID, again.CheckoutID, "a repeat under the key answers the original")
			assertError(t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-1", strategy, a, c), key),
				http.StatusConflict, "idempotency_conflict")

			assertCheckoutError(t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-2", strategy, a, b), nil),
				http.StatusConflict, "sold_out", b)
			assertCheckoutError(t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-1", strategy, c, a), nil),
				http.StatusConflict, "already_purchased", a)
			assertCheckoutError(t, s.do(t, http.MethodPost, checkoutsPath, checkoutBody("u-3", strategy, c, base+"-unknown"), nil),
				http.StatusNotFound, "not_found", base+"-unknown")
			assert.EqualValues(t, 1, s.product(t, a).Stock, "the refused checkouts deducted nothing")
			assert.EqualValues(t, 5, s.product(t, c).Stock)

			paid := decode[contract.Order](t, s.do(t, http.MethodPost, payPath(co.Lines[0].OrderID), `{"user_id":"u-1"}`, nil),
				http.StatusOK, orderFields)
			assert.Equal(t, "confirmed", paid.Status)
			read := decode[contract.Checkout](t, s.do(t, http.MethodGet, checkoutPath(co.CheckoutID), "", nil), http.StatusOK, checkoutFields)
			assert.Equal(t, "confirmed", read.Status, "a line's payment paid the whole checkout")
			assert.Nil(t, read.ExpiresAt)

			assertError(t, s.do(t, http.MethodPost, checkoutPath(co.CheckoutID)+"/cancel", `{"user_id":"u-2"}`, nil),
				http.StatusNotFound, "not_found")
			for range 2 {
				cancelled := decode[contract.Checkout](t, s.do(t, http.MethodPost, checkoutPath(co.CheckoutID)+"/cancel",
					`{"user_id":"u-1"}`, nil), http.StatusOK, checkoutFields)
				assert.Equal(t, "cancelled", cancelled.Status)
			}
			assert.EqualValues(t, 2, s.product(t, a).Stock, "every line's unit came back once")
			assert.EqualValues(t, 1, s.product(t, b).Stock)
			for _, sku := range []string{a, b, c} {
				audit := s.audit(t, sku)
				assert.True(t, audit.Consistent, sku)
				if audit.HeldBack != nil {
					assert.Zero(t, *audit.HeldBack, "%s: admission holds back no unit of a refused or cancelled line", sku)
				}
			}
		})
	}
	unknown := "01M8R9XCTXVXMM49XG5XN5BGEF"
	for _, path := range []string{checkoutPath(unknown), checkoutPath("not-an-id")} {
		assertError(t, s.do(t, http.MethodGet, path, "", nil), http.StatusNotFound, "not_found")
	}
}

// TestCheckoutRefusesBadBodies: a body that breaks the contract's rules is 400 invalid_argument,
// before any backend is asked.
func TestCheckoutRefusesBadBodies(t *testing.T) {
	s := newServer(t)
	many := make([]string, 21)
	for i := range many {
		many[i] = fmt.Sprintf("p%d", i)
	}
	for name, body := range map[string]string{
		"no lines":         `{"user_id":"u-1","lines":[]}`,
		"lines missing":    `{"user_id":"u-1"}`,
		"21 lines":         checkoutBody("u-1", "", many...),
		"a SKU twice":      checkoutBody("u-1", "", "p1", "p2", "p1"),
		"a bad quantity":   `{"user_id":"u-1","lines":[{"sku":"p1","quantity":0}]}`,
		"a bad SKU":        `{"user_id":"u-1","lines":[{"sku":"no spaces"}]}`,
		"no SKU":           `{"user_id":"u-1","lines":[{"quantity":1}]}`,
		"an unknown field": `{"user_id":"u-1","lines":[{"sku":"p1","colour":"red"}]}`,
		"no user":          `{"lines":[{"sku":"p1"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			assertError(t, s.do(t, http.MethodPost, checkoutsPath, body, nil), http.StatusBadRequest, "invalid_argument")
		})
	}
}
