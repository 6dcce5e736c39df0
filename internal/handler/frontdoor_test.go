package handler_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/service"
)

// TestWaitingRoomProduct: PUT takes a waiting room, pass_ttl_s defaulting to 120, GET shows
// it, a PUT without one removes it, and a room out of its bounds is a 400.
func TestWaitingRoomProduct(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)

	put := func(body string) productResponse {
		t.Helper()
		return decode[productResponse](t, s.do(t, http.MethodPut, productPath(sku), body, admin), http.StatusOK, productFields)
	}
	p := put(`{"name":"iPhone 17","stock":10,"waiting_room":{"admit_per_s":50}}`)
	require.NotNil(t, p.WaitingRoom)
	assert.Equal(t, 50, p.WaitingRoom.AdmitPerS)
	assert.Equal(t, 120, p.WaitingRoom.PassTTLS, "pass_ttl_s defaults to 120")
	assert.Equal(t, p, s.product(t, sku), "GET shows what PUT set")

	p = put(`{"name":"iPhone 17","stock":10,"waiting_room":{"admit_per_s":100000,"pass_ttl_s":3600}}`)
	assert.Equal(t, 100000, p.WaitingRoom.AdmitPerS)
	assert.Equal(t, 3600, p.WaitingRoom.PassTTLS)

	p = put(`{"name":"iPhone 17","stock":10}`)
	assert.Nil(t, p.WaitingRoom, "a PUT without a room removes it")
	assert.Nil(t, s.product(t, sku).WaitingRoom)

	for name, room := range map[string]string{
		"no admit_per_s":       `{}`,
		"admit_per_s 0":        `{"admit_per_s":0}`,
		"admit_per_s too high": `{"admit_per_s":100001}`,
		"pass_ttl_s 9":         `{"admit_per_s":1,"pass_ttl_s":9}`,
		"pass_ttl_s 0":         `{"admit_per_s":1,"pass_ttl_s":0}`,
		"pass_ttl_s too long":  `{"admit_per_s":1,"pass_ttl_s":3601}`,
		"unknown field":        `{"admit_per_s":1,"rate":2}`,
		"not an object":        `5`,
		"fractional":           `{"admit_per_s":1.5}`,
	} {
		t.Run(name, func(t *testing.T) {
			assertError(t, s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":1,"waiting_room":`+room+`}`, admin),
				http.StatusBadRequest, "invalid_argument")
		})
	}
}

// TestPutResetsRoom: a PUT starts the product's line again, empty.
func TestPutResetsRoom(t *testing.T) {
	s := newServer(t)
	sku := backendtest.SKU(t)
	s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":10,"waiting_room":{"admit_per_s":5}}`, admin)
	rdb := backendtest.Redis(t)
	room := frontdoor.NewRoom(rdb, frontdoor.NewPasses(rdb, frontdoor.Options{}), frontdoor.Options{})
	p := frontdoor.Product{SKU: sku, Room: frontdoor.Config{AdmitPerS: 5}}
	_, err := room.Join(context.Background(), p, "u-1")
	require.NoError(t, err)
	stats, err := room.Stats(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.Joined)

	s.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":10,"waiting_room":{"admit_per_s":5}}`, admin)
	stats, err = room.Stats(context.Background(), p)
	require.NoError(t, err)
	assert.Zero(t, stats.Joined, "the new round's line is empty")
}

// issuer signs buyer tokens with an ed25519 key of a JWKS it serves, as an identity provider.
type issuer struct {
	key  ed25519.PrivateKey
	kid  string
	jwks string // the JWKS's URL
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	is := &issuer{key: key, kid: "k1"}
	doc, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": is.kid,
		"x": base64.RawURLEncoding.EncodeToString(pub)}}})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}))
	t.Cleanup(srv.Close)
	is.jwks = srv.URL
	return is
}

// token signs claims with the issuer's key (or another method and key, for forgeries).
func (is *issuer) token(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = is.kid
	s, err := tok.SignedString(is.key)
	require.NoError(t, err)
	return s
}

// bearer is the header of a request with buyer sub's good token.
func (is *issuer) bearer(t *testing.T, sub string) header {
	t.Helper()
	return header{"Authorization": "Bearer " + is.token(t, jwt.MapClaims{"sub": sub, "aud": "seckill", "exp": time.Now().Add(time.Hour).Unix()})}
}

// identityServer is an instance with buyer identity on (audience seckill) and tweaks.
func identityServer(t *testing.T, is *issuer, tweak ...func(*app.Config)) *server {
	t.Helper()
	return newServerOn(t, service.Defaults(), backendtest.Wiring{}, append([]func(*app.Config){func(c *app.Config) {
		c.Buyers.JWKS, c.Buyers.Audience = is.jwks, "seckill"
	}}, tweak...)...)
}

// TestBuyerIdentity: every forgery of the contract is 401 unauthenticated with WWW-Authenticate;
// a body naming another buyer is 403 forbidden; another buyer's order is 404.
func TestBuyerIdentity(t *testing.T) {
	is := newIssuer(t)
	s := identityServer(t, is)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 10, 1)
	exp := time.Now().Add(time.Hour).Unix()

	_, otherKey, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	sign := func(m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, claims)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	good := jwt.MapClaims{"sub": "u-1", "aud": "seckill", "exp": exp}
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
	noneTok, err := jwt.NewWithClaims(jwt.SigningMethodNone, good).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	forgeries := map[string]string{
		"no token":        "",
		"not bearer":      "Basic dTpw",
		"garbage":         "Bearer not.a.jwt",
		"bad signature":   "Bearer " + sign(jwt.SigningMethodEdDSA, otherKey, is.kid, good),
		"unknown kid":     "Bearer " + sign(jwt.SigningMethodEdDSA, is.key, "k9", good),
		"exp missing":     "Bearer " + is.token(t, with("exp", nil)),
		"exp passed":      "Bearer " + is.token(t, with("exp", time.Now().Add(-time.Minute).Unix())),
		"nbf in future":   "Bearer " + is.token(t, with("nbf", time.Now().Add(time.Hour).Unix())),
		"wrong aud":       "Bearer " + is.token(t, with("aud", "another")),
		"alg none":        "Bearer " + noneTok,
		"hmac":            "Bearer " + sign(jwt.SigningMethodHS256, []byte("public-key-as-secret"), is.kid, good),
		"no sub":          "Bearer " + is.token(t, with("sub", nil)),
		"the admin token": "Bearer " + adminToken,
	}
	for name, auth := range forgeries {
		t.Run(name, func(t *testing.T) {
			h := header{}
			if auth != "" {
				h["Authorization"] = auth
			}
			rec := s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, h)
			assertError(t, rec, http.StatusUnauthorized, "unauthenticated")
			assert.Equal(t, "Bearer", rec.Header().Get("WWW-Authenticate"))
		})
	}
	s.requireUntouched(t, sku, 10)

	assertError(t, s.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-2"}`, is.bearer(t, "u-1")), http.StatusForbidden, "forbidden")
	assertError(t, s.do(t, http.MethodPost, "/api/v1/checkouts", `{"user_id":"u-2","lines":[{"sku":"`+sku+`"}]}`, is.bearer(t, "u-1")),
		http.StatusForbidden, "forbidden")
	s.requireUntouched(t, sku, 10)

	o := s.order(t, sku, `{}`, is.bearer(t, "u-1"))
	assert.Equal(t, "u-1", o.UserID, "the buyer is the token's sub")
	assert.Equal(t, http.StatusOK, s.do(t, http.MethodGet, orderPath(o.OrderID), "", is.bearer(t, "u-1")).Code)
	assertError(t, s.do(t, http.MethodGet, orderPath(o.OrderID), "", is.bearer(t, "u-2")), http.StatusNotFound, "not_found")
	assertError(t, s.do(t, http.MethodGet, orderPath(o.OrderID), "", nil), http.StatusUnauthorized, "unauthenticated")
	assertError(t, s.do(t, http.MethodPost, orderPath(o.OrderID)+"/cancel", `{"user_id":"u-1"}`, is.bearer(t, "u-2")),
		http.StatusForbidden, "forbidden")
	assert.Equal(t, http.StatusOK, s.do(t, http.MethodPost, orderPath(o.OrderID)+"/cancel", "", admin).Code, "the admin cancels anyone's")
}

// TestBuyerLimit: one buyer over its bucket is 429 rate_limited with Retry-After, counted
// across two instances together; another buyer is not held back.
func TestBuyerLimit(t *testing.T) {
	is := newIssuer(t)
	limit := func(c *app.Config) { c.Buyers.Rate, c.Buyers.Burst = 0.2, 2 }
	a, b := identityServer(t, is, limit), identityServer(t, is, limit)
	sku := backendtest.SKU(t)
	a.putProduct(t, sku, 10, 1)
	buyer := "u-" + sku
	path := "/api/v1/orders/01JDQ7Z8K3M4N5P6Q7R8S9T0VW"
	assert.Equal(t, http.StatusNotFound, a.do(t, http.MethodGet, path, "", is.bearer(t, buyer)).Code)
	assert.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, path, "", is.bearer(t, buyer)).Code)
	rec := a.do(t, http.MethodGet, path, "", is.bearer(t, buyer))
	assertError(t, rec, http.StatusTooManyRequests, "rate_limited")
	assertRetryAfter(t, rec)
	rec = b.do(t, http.MethodGet, path, "", is.bearer(t, buyer))
	assertError(t, rec, http.StatusTooManyRequests, "rate_limited")
	assertRetryAfter(t, rec)
	assert.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, path, "", is.bearer(t, buyer+"-other")).Code)
}

// TestQueueAndPass: join on one instance, poll on another until admitted, then the pass buys on
// either; no pass is 403 pass_required, another buyer's or product's pass_invalid; a checkout
// with one waiting-room product needs that product's pass; sold out ends every wait with 409.
func TestQueueAndPass(t *testing.T) {
	a, b := newServer(t), newServer(t)
	sku, plain := backendtest.SKU(t), backendtest.SKU(t)
	a.do(t, http.MethodPut, productPath(sku), `{"name":"x","stock":1,"waiting_room":{"admit_per_s":1000}}`, admin)
	a.putProduct(t, plain, 10, 1)

	join := func(s *server, user string) (string, string) {
		t.Helper()
		rec := s.do(t, http.MethodPost, productPath(sku)+"/queue", `{"user_id":"`+user+`"}`, nil)
		require.Equal(t, http.StatusAccepted, rec.Code, "body: %s", rec.Body)
		var w struct {
			Ticket      string
			Position    *int64
			PollAfterMS *int64 `json:"poll_after_ms"`
			Pass        *string
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &w))
		assert.Equal(t, productPath(sku)+"/queue/"+w.Ticket, rec.Header().Get("Location"))
		assert.NotNil(t, w.Position, "a join answers a position, the first in line too: %s", rec.Body)
		assert.NotNil(t, w.PollAfterMS, "a join says when to poll: %s", rec.Body)
		assert.Nil(t, w.Pass, "only a poll issues a pass: %s", rec.Body)
		return w.Ticket, rec.Header().Get("Location")
	}
	pass := func(s *server, user, loc string) string {
		t.Helper()
		var w struct {
			Admitted bool
			Pass     string
		}
		require.Eventually(t, func() bool {
			rec := s.do(t, http.MethodGet, loc+"?user_id="+user, "", nil)
			require.Equal(t, http.StatusOK, rec.Code, "body: %s", rec.Body)
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &w))
			return w.Admitted
		}, 5*time.Second, 10*time.Millisecond)
		return w.Pass
	}
	t1, loc1 := join(a, "u-1")
	again, _ := join(b, "u-1")
	assert.Equal(t, t1, again, "one ticket per buyer")
	_, loc2 := join(b, "u-2")
	p1, p2 := pass(b, "u-1", loc1), pass(a, "u-2", loc2)
	assertError(t, a.do(t, http.MethodGet, loc1+"?user_id=u-2", "", nil), http.StatusNotFound, "not_found")
	assertError(t, a.do(t, http.MethodPost, productPath(plain)+"/queue", `{"user_id":"u-1"}`, nil), http.StatusNotFound, "not_found")

	assertError(t, a.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, nil), http.StatusForbidden, "pass_required")
	assertError(t, a.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, header{"Seckill-Pass": p2}), http.StatusForbidden, "pass_invalid")
	assertError(t, a.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-1"}`, header{"Seckill-Pass": p1 + "x"}), http.StatusForbidden, "pass_invalid")
	rec := a.do(t, http.MethodPost, "/api/v1/checkouts", `{"user_id":"u-1","lines":[{"sku":"`+plain+`"},{"sku":"`+sku+`"}]}`, nil)
	assert.Equal(t, http.StatusForbidden, rec.Code, "body: %s", rec.Body)
	assert.Contains(t, rec.Body.String(), `"pass_required"`)
	assert.Zero(t, a.product(t, plain).Sold, "nothing placed without the pass")

	co := a.do(t, http.MethodPost, "/api/v1/checkouts", `{"user_id":"u-1","lines":[{"sku":"`+plain+`"},{"sku":"`+sku+`"}]}`, header{"Seckill-Pass": p1})
	require.Equal(t, http.StatusCreated, co.Code, "body: %s", co.Body)
	// Sold out now: a join is 409, and a pass buys no unit that is not there.
	assertError(t, b.do(t, http.MethodPost, productPath(sku)+"/queue", `{"user_id":"u-3"}`, nil), http.StatusConflict, "sold_out")
	assertError(t, b.do(t, http.MethodPost, ordersPath(sku), `{"user_id":"u-2"}`, header{"Seckill-Pass": p2}), http.StatusConflict, "sold_out")
	assert.True(t, a.audit(t, sku).Consistent)
}
