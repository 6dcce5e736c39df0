package frontdoor

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// passIssuer is the iss of every pass, so that no other token signed with HS256 passes for one.
const passIssuer = "seckill-pass"

// Passes signs and checks the passes a waiting room hands out: a JWT (HS256) bound to its buyer
// (sub), its product (aud) and its expiry (exp). Every instance signs with one secret, made once
// by whichever instance needs it first and kept in Redis (SET NX), so that every instance
// accepts every other's passes; a check is then local: no round trip per order. It is safe for
// concurrent use.
type Passes struct {
	client redis.UniversalClient
	key    string // the secret's Redis key
	now    func() time.Time
	secret atomic.Pointer[[]byte] // nil until loaded
}

// NewPasses returns the passes of the deployment whose Redis is client. The secret is loaded
// at the first pass signed or checked, and kept.
func NewPasses(client redis.UniversalClient, opts Options) *Passes {
	opts = opts.withDefaults()
	return &Passes{client: client, key: opts.Prefix + "frontdoor:pass-key", now: opts.Clock}
}

// secretKey is the deployment's pass secret: loaded once from Redis, or made there (SET NX)
// when no instance has made it yet. Every caller that races to make it — on this instance or
// another — reads the winner's, so no lock is needed, and none holds requests in line while
// Redis is out of reach.
func (p *Passes) secretKey(ctx context.Context) ([]byte, error) {
	if secret := p.secret.Load(); secret != nil {
		return *secret, nil
	}
	fresh := make([]byte, 32)
	_, _ = rand.Read(fresh) // crypto/rand never fails on Linux
	if err := p.client.SetNX(ctx, p.key, base64.RawStdEncoding.EncodeToString(fresh), 0).Err(); err != nil {
		return nil, fmt.Errorf("pass key: %w: %w", stock.ErrUnavailable, err)
	}
	kept, err := p.client.Get(ctx, p.key).Result()
	if err != nil {
		return nil, fmt.Errorf("pass key: %w: %w", stock.ErrUnavailable, err)
	}
	secret, err := base64.RawStdEncoding.DecodeString(kept)
	if err != nil || len(secret) < 32 {
		return nil, fmt.Errorf("pass key %s in Redis is not 32 bytes of base64: %w", p.key, stock.ErrUnavailable)
	}
	p.secret.Store(&secret)
	return secret, nil
}

// issue signs buyer's pass for sku, under ticket, good until exp. The same arguments make the
// same pass on every instance (HMAC is deterministic), which is how a buyer is handed the same
// pass on every poll without the pass itself being kept anywhere.
func (p *Passes) issue(ctx context.Context, buyer, sku, ticket string, exp time.Time) (string, error) {
	secret, err := p.secretKey(ctx)
	if err != nil {
		return "", err
	}
	claims := jwt.RegisteredClaims{
		Issuer: passIssuer, Subject: buyer, Audience: jwt.ClaimStrings{sku},
		ExpiresAt: jwt.NewNumericDate(exp), ID: ticket,
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// CheckPass says whether header — the Seckill-Pass header: one pass, or a checkout's
// comma-separated passes — holds buyer's pass for sku, good now: nil if one of them is;
// ErrPassRequired if there is none; ErrPassInvalid if none of them is good (forged, expired,
// another buyer's or another product's); stock.ErrUnavailable (wrapped) if the secret could not
// be loaded. The signature is checked here, by the library, in constant time: no round trip.
//
// When the door cannot judge — no secret yet and Redis down — the order is refused, never let
// through: a pass is the only thing between the crowd and the lock, and a door that opens when
// its state is lost lets the whole queue in at once, the very overload the room exists to
// prevent. A refused buyer retries; an overloaded sale fails everyone.
func (p *Passes) CheckPass(ctx context.Context, header, buyer, sku string) error {
	var passes []string
	for pass := range strings.SplitSeq(header, ",") {
		if pass = strings.TrimSpace(pass); pass != "" {
			passes = append(passes, pass)
		}
	}
	if len(passes) == 0 {
		return fmt.Errorf("product %s: %w", sku, ErrPassRequired)
	}
	// jwt.WithSubject("") and jwt.WithAudience("") check nothing: an empty buyer or product
	// would let any pass through.
	if buyer == "" || sku == "" {
		return fmt.Errorf("product %s: %w: no buyer or no product to check it for", sku, ErrPassInvalid)
	}
	secret, err := p.secretKey(ctx)
	if err != nil {
		return err
	}
	parse := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithExpirationRequired(),
		jwt.WithIssuer(passIssuer), jwt.WithAudience(sku), jwt.WithTimeFunc(p.now),
	}
	if !planted.On(planted.PassForAnyBuyer) {
		parse = append(parse, jwt.WithSubject(buyer))
	}
	if planted.On(planted.ExpiredPass) {
		parse = append(parse, jwt.WithLeeway(100*365*24*time.Hour))
	}
	parser := jwt.NewParser(parse...)
	var last error
	for _, pass := range passes {
		if _, last = parser.ParseWithClaims(pass, &jwt.RegisteredClaims{}, func(*jwt.Token) (any, error) { return secret, nil }); last == nil {
			return nil
		}
	}
	return fmt.Errorf("product %s: %w: %w", sku, ErrPassInvalid, last)
}
