package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// BuyerMethods are the signing algorithms a buyer token may use: public-key signatures only.
// An HMAC algorithm would let anyone holding the JWKS (public by design) sign tokens with a
// public key as the secret, and "none" would need no key at all: both are refused by the pin.
var BuyerMethods = []string{"EdDSA", "ES256", "RS256"}

// maxBuyer is the longest sub a buyer may have: a user_id's bound in the API.
const maxBuyer = 64

// VerifierOptions are a Verifier's settings beyond its source and audience; the zero value is
// the default.
type VerifierOptions struct {
	// Client fetches a URL's JWKS; nil: a client that gives up after 10 s.
	Client *http.Client
	// Refresh is how often a URL's JWKS is fetched again in the background; zero: every 5
	// minutes. A key the identity provider publishes is accepted at the latest one Refresh later.
	Refresh time.Duration
	// RefreshUnknown is the least time between the fetches that a token with an unknown kid
	// starts, so that a key published a moment ago is accepted at once while a stream of made-up
	// kids cannot make the service hammer the identity provider; zero: one minute; negative:
	// never (only Refresh brings new keys).
	RefreshUnknown time.Duration
	// Log hears of failed background fetches (never a token); nil: they go unsaid.
	Log *slog.Logger
}

// A Verifier says who a buyer is: the sub of a token signed by one of the keys of a JWKS. The
// library judges the token (golang-jwt's parser with the algorithms pinned, exp required, nbf
// checked, aud when set), never a hand-written parse. It is safe for concurrent use.
type Verifier struct {
	keys   keyfunc.Keyfunc
	parser *jwt.Parser
}

// NewVerifier returns a verifier of the tokens signed by the keys of jwks: a file path, read
// once, or an http(s):// URL, fetched now — a URL that does not answer is an error, so that a
// typo fails the start instead of every buyer — and again in the background until ctx ends.
// audience, when not "", is the aud a token must carry.
func NewVerifier(ctx context.Context, jwks, audience string, opts VerifierOptions) (*Verifier, error) {
	var (
		keys keyfunc.Keyfunc
		err  error
	)
	if lower := strings.ToLower(jwks); strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") {
		keys, err = fetched(ctx, jwks, opts)
	} else {
		var raw []byte
		if raw, err = os.ReadFile(jwks); err == nil {
			keys, err = keyfunc.NewJWKSetJSON(raw)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("buyer keys (JWKS) %s: %w", jwks, err)
	}
	parse := []jwt.ParserOption{jwt.WithValidMethods(BuyerMethods), jwt.WithExpirationRequired()}
	if audience != "" {
		parse = append(parse, jwt.WithAudience(audience))
	}
	return &Verifier{keys: keys, parser: jwt.NewParser(parse...)}, nil
}

// fetched is keyfunc's refreshing client of the JWKS at url.
func fetched(ctx context.Context, url string, opts VerifierOptions) (keyfunc.Keyfunc, error) {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Refresh <= 0 {
		opts.Refresh = 5 * time.Minute
	}
	unknown := rate.NewLimiter(0, 0) // a limiter that never allows: no fetch for an unknown kid
	switch {
	case opts.RefreshUnknown == 0:
		unknown = rate.NewLimiter(rate.Every(time.Minute), 1)
	case opts.RefreshUnknown > 0:
		unknown = rate.NewLimiter(rate.Every(opts.RefreshUnknown), 1)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	required := false // the first fetch must succeed (NewVerifier)
	return keyfunc.NewDefaultOverrideCtx(ctx, []string{url}, keyfunc.Override{
		Client:                    opts.Client,
		HTTPTimeout:               opts.Client.Timeout,
		NoErrorReturnFirstHTTPReq: &required,
		RefreshInterval:           opts.Refresh,
		RefreshUnknownKID:         unknown,
		// A request with an unknown kid waits at most this long for its turn to fetch; past
		// it, it is refused at once instead of holding a connection for the limiter's minute.
		RateLimitWaitMax: time.Second,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				log.WarnContext(ctx, "buyer keys: fetching the JWKS failed; the keys fetched last stay in use", "url", u, "err", err)
			}
		},
	})
}

// Buyer returns the buyer an Authorization header names: the sub of its bearer token. Any
// failure — no header, another scheme, a bad signature, an unknown kid, exp missing or passed,
// nbf in the future, the wrong aud, alg none or an HMAC algorithm, no sub — is
// ErrUnauthenticated, wrapped with the reason (never with the token).
func (v *Verifier) Buyer(ctx context.Context, authorization string) (string, error) {
	token := bearer(authorization)
	if token == "" {
		return "", fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	var claims jwt.RegisteredClaims
	if _, err := v.parser.ParseWithClaims(token, &claims, v.keys.KeyfuncCtx(ctx)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	// The sub is the buyer's user_id everywhere after this: it must be one.
	if claims.Subject == "" || len(claims.Subject) > maxBuyer {
		return "", fmt.Errorf("%w: %w", ErrUnauthenticated, errors.New("the token's sub is empty or longer than 64 bytes"))
	}
	return claims.Subject, nil
}
