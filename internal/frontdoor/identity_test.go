package frontdoor_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/frontdoor"
)

// signer is one key of the test's identity provider.
type signer struct {
	kid    string
	method jwt.SigningMethod
	key    crypto.Signer
}

func edKey(t *testing.T, kid string) signer {
	t.Helper()
	_, private, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return signer{kid, jwt.SigningMethodEdDSA, private}
}

func ecKey(t *testing.T, kid string) signer {
	t.Helper()
	private, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return signer{kid, jwt.SigningMethodES256, private}
}

func rsaKey(t *testing.T, kid string) signer {
	t.Helper()
	private, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return signer{kid, jwt.SigningMethodRS256, private}
}

// sign is a token of claims signed by s, naming its kid.
func (s signer) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	token := jwt.NewWithClaims(s.method, claims)
	token.Header["kid"] = s.kid
	signed, err := token.SignedString(s.key)
	require.NoError(t, err)
	return signed
}

// jwks is the JSON Web Key Set of the public halves of keys, as an identity provider publishes it.
func jwks(t *testing.T, keys ...signer) []byte {
	t.Helper()
	store := jwkset.NewMemoryStorage()
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.key.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: k.kid, ALG: jwkset.ALG(k.method.Alg()), USE: jwkset.UseSig,
		}})
		require.NoError(t, err)
		require.NoError(t, store.KeyWrite(context.Background(), jwk))
	}
	raw, err := store.JSONPublic(context.Background())
	require.NoError(t, err)
	return raw
}

// claims are a good buyer token's: sub u-1001, aud seckill, an hour to live; change them to break it.
func claims(change func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "u-1001", "aud": "seckill", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	if change != nil {
		change(c)
	}
	return c
}

// TestBuyerTokens: a token signed by a key of the JWKS file, with exp, nbf and aud right, names
// its buyer; every other token is ErrUnauthenticated — and the error never carries the token.
func TestBuyerTokens(t *testing.T) {
	ed, ec, rs := edKey(t, "ed-1"), ecKey(t, "ec-1"), rsaKey(t, "rsa-1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(file, jwks(t, ed, ec, rs), 0o600))
	v, err := frontdoor.NewVerifier(t.Context(), file, "seckill", frontdoor.VerifierOptions{})
	require.NoError(t, err)

	impostor := edKey(t, "ed-1") // another key under a published kid
	stranger := edKey(t, "ed-9") // a key the JWKS does not have
	noneToken, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	// The classic confusion: HS256 with the published public key as the HMAC secret.
	hmacToken := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
	hmacToken.Header["kid"] = "ed-1"
	hmacSigned, err := hmacToken.SignedString([]byte(ed.key.Public().(ed25519.PublicKey)))
	require.NoError(t, err)
	good := ed.sign(t, claims(nil))
	mine, theirs := strings.Split(good, "."), strings.Split(ed.sign(t, claims(func(c jwt.MapClaims) { c["sub"] = "u-2002" })), ".")
	tampered := mine[0] + "." + theirs[1] + "." + mine[2] // u-2002's claims under u-1001's signature

	for _, tc := range []struct {
		name, header string
		ok           bool
	}{
		{"EdDSA", "Bearer " + good, true},
		{"ES256", "Bearer " + ec.sign(t, claims(nil)), true},
		{"RS256", "Bearer " + rs.sign(t, claims(nil)), true},
		{"scheme in any case", "bearer " + good, true},
		{"no header", "", false},
		{"another scheme", "Basic " + good, false},
		{"bad signature", "Bearer " + impostor.sign(t, claims(nil)), false},
		{"claims changed after signing", "Bearer " + tampered, false},
		{"unknown kid", "Bearer " + stranger.sign(t, claims(nil)), false},
		{"exp missing", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { delete(c, "exp") })), false},
		{"exp passed", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), false},
		{"nbf in the future", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), false},
		{"wrong aud", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { c["aud"] = "another-service" })), false},
		{"no aud", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { delete(c, "aud") })), false},
		{"no sub", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { delete(c, "sub") })), false},
		{"sub longer than a user_id", "Bearer " + ed.sign(t, claims(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("u", 65) })), false},
		{"alg none", "Bearer " + noneToken, false},
		{"HMAC with the public key", "Bearer " + hmacSigned, false},
		{"garbage", "Bearer not.a.token", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buyer, err := v.Buyer(t.Context(), tc.header)
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, "u-1001", buyer)
				return
			}
			require.ErrorIs(t, err, frontdoor.ErrUnauthenticated)
			assert.Empty(t, buyer)
			if token := strings.TrimPrefix(strings.TrimPrefix(tc.header, "Bearer "), "Basic "); token != "" {
				assert.NotContains(t, err.Error(), token, "an error that carries the token would put it in a log")
			}
		})
	}
}

// TestVerifierWithoutAudience: with no audience set, a token's aud is not asked for.
func TestVerifierWithoutAudience(t *testing.T) {
	ed := edKey(t, "ed-1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(file, jwks(t, ed), 0o600))
	v, err := frontdoor.NewVerifier(t.Context(), file, "", frontdoor.VerifierOptions{})
	require.NoError(t, err)
	buyer, err := v.Buyer(t.Context(), "Bearer "+ed.sign(t, claims(func(c jwt.MapClaims) { delete(c, "aud") })))
	require.NoError(t, err)
	assert.Equal(t, "u-1001", buyer)
}

// TestVerifierRefusesBadSources: a JWKS that cannot be had fails the start, not every buyer.
func TestVerifierRefusesBadSources(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(down.Close)
	notJSON := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(notJSON, []byte("not json"), 0o600))
	for name, source := range map[string]string{
		"missing file": filepath.Join(t.TempDir(), "none.json"), "not JSON": notJSON, "URL answers 404": down.URL,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := frontdoor.NewVerifier(t.Context(), source, "", frontdoor.VerifierOptions{})
			require.Error(t, err)
		})
	}
}

// provider is an identity provider's JWKS endpoint whose keys the test rotates. Each fetch is
// counted, and the key ids it served are sent on served, for a test to wait on.
type provider struct {
	mu      sync.Mutex
	body    []byte
	kids    string
	fetches atomic.Int32
	served  chan string
}

func newProvider(t *testing.T, keys ...signer) *provider {
	p := &provider{served: make(chan string, 64)}
	p.publish(t, keys...)
	return p
}

// publish makes keys the JWKS, replacing the last one: a key left out is revoked.
func (p *provider) publish(t *testing.T, keys ...signer) {
	t.Helper()
	body := jwks(t, keys...)
	var kids []string
	for _, k := range keys {
		kids = append(kids, k.kid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.body, p.kids = body, strings.Join(kids, ",")
}

func (p *provider) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	body, kids := p.body, p.kids
	p.mu.Unlock()
	p.fetches.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	select {
	case p.served <- kids:
	default:
	}
}

// TestKeyRotationUnknownKid: a key the provider publishes is accepted at its first token, which
// fetches the JWKS again; a stream of made-up kids then fetches nothing more (the fetches for
// unknown kids are rate limited), so it cannot make the service hammer the provider.
func TestKeyRotationUnknownKid(t *testing.T) {
	old, fresh := edKey(t, "ed-1"), edKey(t, "ed-2")
	idp := newProvider(t, old)
	srv := httptest.NewServer(idp)
	t.Cleanup(srv.Close)
	v, err := frontdoor.NewVerifier(t.Context(), srv.URL, "seckill", frontdoor.VerifierOptions{Refresh: time.Hour, RefreshUnknown: time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 1, idp.fetches.Load(), "fetched once at the start")

	_, err = v.Buyer(t.Context(), "Bearer "+old.sign(t, claims(nil)))
	require.NoError(t, err)
	idp.publish(t, old, fresh)
	buyer, err := v.Buyer(t.Context(), "Bearer "+fresh.sign(t, claims(nil)))
	require.NoError(t, err, "the key published a moment ago")
	assert.Equal(t, "u-1001", buyer)
	assert.EqualValues(t, 2, idp.fetches.Load(), "the unknown kid fetched the JWKS once")

	for i := range 5 {
		_, err = v.Buyer(t.Context(), "Bearer "+edKey(t, fmt.Sprintf("made-up-%d", i)).sign(t, claims(nil)))
		require.ErrorIs(t, err, frontdoor.ErrUnauthenticated)
	}
	assert.EqualValues(t, 2, idp.fetches.Load(), "made-up kids fetched nothing more")
	_, err = v.Buyer(t.Context(), "Bearer "+old.sign(t, claims(nil)))
	require.NoError(t, err, "the keys fetched stay in use")
}

// TestKeyRotationBackground: over https, the background refresh brings a new key and drops a
// revoked one, with no token asking for it.
func TestKeyRotationBackground(t *testing.T) {
	old, fresh := edKey(t, "ed-1"), edKey(t, "ed-2")
	idp := newProvider(t, old)
	srv := httptest.NewTLSServer(idp)
	t.Cleanup(srv.Close)
	v, err := frontdoor.NewVerifier(t.Context(), srv.URL, "seckill", frontdoor.VerifierOptions{
		Client: srv.Client(), Refresh: 20 * time.Millisecond, RefreshUnknown: -1,
	})
	require.NoError(t, err)
	_, err = v.Buyer(t.Context(), "Bearer "+fresh.sign(t, claims(nil)))
	require.ErrorIs(t, err, frontdoor.ErrUnauthenticated, "not published yet")

	idp.publish(t, fresh) // rotated: ed-1 revoked
	select {
	case <-waitServed(idp, "ed-2"):
	case <-time.After(10 * time.Second):
		t.Fatal("the background refresh never fetched the rotated JWKS")
	}
	// The set fetched is stored right after it is served.
	require.Eventually(t, func() bool {
		_, err := v.Buyer(t.Context(), "Bearer "+fresh.sign(t, claims(nil)))
		return err == nil
	}, 5*time.Second, 5*time.Millisecond, "the rotated key was never accepted")
	_, err = v.Buyer(t.Context(), "Bearer "+old.sign(t, claims(nil)))
	require.ErrorIs(t, err, frontdoor.ErrUnauthenticated, "the revoked key is refused")
}

// waitServed is closed once idp has served a JWKS of exactly kids.
func waitServed(idp *provider, kids string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for served := range idp.served {
			if served == kids {
				return
			}
		}
	}()
	return done
}
