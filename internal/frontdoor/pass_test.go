package frontdoor_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/stock"
)

// admit joins buyer to p's room on d and polls until it is admitted: p's rate makes that at once.
func admit(t *testing.T, d instance, p frontdoor.Product, buyer string) frontdoor.Wait {
	t.Helper()
	w, err := d.room.Join(t.Context(), p, buyer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		w, err = d.room.Poll(t.Context(), p, buyer, w.Ticket)
		require.NoError(t, err)
		return w.Admitted
	}, 5*time.Second, time.Millisecond, "never admitted")
	require.NotEmpty(t, w.Pass)
	return w
}

// fast is a product whose room lets everyone in at once.
func fast(sku string) frontdoor.Product {
	return frontdoor.Product{SKU: sku, Room: frontdoor.Config{AdmitPerS: frontdoor.MaxAdmitPerS}}
}

// TestPassChecks: a pass lets in its buyer for its product; none is pass_required; anything
// else — another product's, forged, tampered, unsigned, a buyer token — is pass_invalid.
func TestPassChecks(t *testing.T) {
	door := instances(t, 2, keyPrefix(t))
	phone, cover := admit(t, door[0], fast("iphone-17"), "u-1"), admit(t, door[0], fast("case-17"), "u-1")
	claims := jwt.RegisteredClaims{
		Issuer: "seckill-pass", Subject: "u-1", Audience: jwt.ClaimStrings{"iphone-17"},
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute)),
	}
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("a secret the service never made"))
	require.NoError(t, err)
	unsigned, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	parts := strings.Split(phone.Pass, ".")
	tampered := parts[0] + "." + strings.Split(cover.Pass, ".")[1] + "." + parts[2]
	buyerToken := edKey(t, "ed-1").sign(t, jwt.MapClaims{"sub": "u-1", "aud": "iphone-17", "iss": "seckill-pass", "exp": time.Now().Add(time.Minute).Unix()})

	for _, tc := range []struct {
		name, header, buyer, sku string
		want                     error
	}{
		{"its own, checked on another instance", phone.Pass, "u-1", "iphone-17", nil},
		{"one of a checkout's", cover.Pass + ", " + phone.Pass, "u-1", "iphone-17", nil},
		{"the other of a checkout's", cover.Pass + "," + phone.Pass, "u-1", "case-17", nil},
		{"none", "", "u-1", "iphone-17", frontdoor.ErrPassRequired},
		{"only commas", " , ", "u-1", "iphone-17", frontdoor.ErrPassRequired},
		{"another product's", cover.Pass, "u-1", "iphone-17", frontdoor.ErrPassInvalid},
		{"forged", forged, "u-1", "iphone-17", frontdoor.ErrPassInvalid},
		{"tampered", tampered, "u-1", "iphone-17", frontdoor.ErrPassInvalid},
		{"unsigned", unsigned, "u-1", "iphone-17", frontdoor.ErrPassInvalid},
		{"a buyer token", buyerToken, "u-1", "iphone-17", frontdoor.ErrPassInvalid},
		{"garbage", "not-a-pass", "u-1", "iphone-17", frontdoor.ErrPassInvalid},
		{"no buyer to check it for", phone.Pass, "", "iphone-17", frontdoor.ErrPassInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := door[1].passes.CheckPass(t.Context(), tc.header, tc.buyer, tc.sku)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, []string{"pass_required", "pass_invalid"}, stock.Code(err))
		})
	}
}

// TestPassBoundToBuyer: a buyer holding another buyer's pass is not let in with it.
func TestPassBoundToBuyer(t *testing.T) {
	door := instances(t, 2, keyPrefix(t))
	theirs := admit(t, door[0], fast("iphone-17"), "u-1")
	require.NoError(t, door[1].passes.CheckPass(t.Context(), theirs.Pass, "u-1", "iphone-17"))
	assert.ErrorIs(t, door[1].passes.CheckPass(t.Context(), theirs.Pass, "u-2", "iphone-17"), frontdoor.ErrPassInvalid,
		"another buyer's pass was refused")
}

// TestPassExpires: a pass is good until its expiry, and not after it.
func TestPassExpires(t *testing.T) {
	prefix := keyPrefix(t)
	door := instances(t, 1, prefix)
	p := fast("iphone-17")
	p.Room.PassTTL = 10 * time.Second
	w := admit(t, door[0], p, "u-1")
	clock := &backendtest.Clock{}
	checker := frontdoor.NewPasses(backendtest.Redis(t), frontdoor.Options{Prefix: prefix, Clock: clock.Now})
	require.NoError(t, checker.CheckPass(t.Context(), w.Pass, "u-1", p.SKU))
	clock.Advance(time.Until(w.PassExpiresAt) + time.Second)
	assert.ErrorIs(t, checker.CheckPass(t.Context(), w.Pass, "u-1", p.SKU), frontdoor.ErrPassInvalid,
		"the expired pass was refused")
}

// TestPassKeyMadeOnce: instances that need the pass secret at the same moment, the first time,
// all end up with the one secret Redis kept, so each accepts every other's passes.
func TestPassKeyMadeOnce(t *testing.T) {
	door := instances(t, 5, keyPrefix(t))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range door {
		wg.Go(func() {
			<-start
			// Loads the secret (making it, for the first to come), then refuses the non-pass.
			assert.ErrorIs(t, d.passes.CheckPass(t.Context(), "not-a-pass", "u-1", "iphone-17"), frontdoor.ErrPassInvalid)
		})
	}
	close(start)
	wg.Wait()
	for i, d := range door {
		w := admit(t, d, fast(fmt.Sprintf("sku-%d", i)), "u-1")
		for _, other := range door {
			require.NoError(t, other.passes.CheckPass(t.Context(), w.Pass, "u-1", fmt.Sprintf("sku-%d", i)))
		}
	}
}
