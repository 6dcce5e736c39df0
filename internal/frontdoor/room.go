package frontdoor

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

var (
	//go:embed lua/clock.lua
	clockLua string
	//go:embed lua/join.lua
	joinLua string
	//go:embed lua/poll.lua
	pollLua string
	//go:embed lua/stats.lua
	statsLua string

	// Each script opens with clock.lua: one line, one counter, one way to read them.
	joinScript  = redis.NewScript(clockLua + joinLua)
	pollScript  = redis.NewScript(clockLua + pollLua)
	statsScript = redis.NewScript(clockLua + statsLua)
)

// A waiting room's bounds (a product's waiting_room: admit_per_s, pass_ttl_s).
const (
	MaxAdmitPerS   = 100000
	MinPassTTL     = 10 * time.Second
	MaxPassTTL     = time.Hour
	DefaultPassTTL = 120 * time.Second
)

// How long a waiting buyer is told to wait before it polls again: half its ETA, within these.
// Those near the front poll often enough to come in on time; those far back do not load Redis.
const (
	minPollAfter = 100 * time.Millisecond
	maxPollAfter = 5 * time.Second
)

// Config is a product's waiting room, as PUT /api/v1/products/{sku} takes it ("waiting_room").
type Config struct {
	AdmitPerS int           // buyers admitted a second, for the whole deployment: 1 to 100000
	PassTTL   time.Duration // how long a pass is good: 10 s to 1 h in whole seconds; zero: 120 s
}

// WithDefaults is c with an unset PassTTL at its default.
func (c Config) WithDefaults() Config {
	if c.PassTTL == 0 {
		c.PassTTL = DefaultPassTTL
	}
	return c
}

// Validate returns a *stock.InvalidError (400 invalid_argument) when c is out of its bounds.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.AdmitPerS < 1 || c.AdmitPerS > MaxAdmitPerS:
		return &stock.InvalidError{Msg: fmt.Sprintf("waiting_room.admit_per_s must be 1 to %d", MaxAdmitPerS)}
	case c.PassTTL < MinPassTTL || c.PassTTL > MaxPassTTL || c.PassTTL%time.Second != 0:
		return &stock.InvalidError{Msg: "waiting_room.pass_ttl_s must be 10 to 3600 seconds"}
	}
	return nil
}

// Product is what a room needs to know of its product, as the caller read it: the same on
// every instance, since every instance reads it from the database.
type Product struct {
	SKU              string
	Room             Config
	StartsAt, EndsAt time.Time // zero: unset
	// SoldOut is the caller's word that nothing is left: every wait then ends in sold out.
	SoldOut bool
}

// A Wait is where a buyer stands in a product's line.
type Wait struct {
	Ticket string
	// Position is the number of buyers still ahead: it never rises. Nil before the doors open,
	// when the line's order is not drawn yet.
	Position *int64
	OpensAt  time.Time     // before the doors open: when they do (the product's starts_at)
	ETA      time.Duration // until admission at the room's rate; before the doors open, until they do
	// PollAfter is when to ask again: half the ETA, from 100 ms to 5 s.
	PollAfter time.Duration

	Admitted      bool
	Pass          string // for the Seckill-Pass header; the same on every poll until it expires
	PassExpiresAt time.Time

	// For the load tool and the tests: the ticket's place in line (from 1; 0 before the doors
	// open), when the serving counter passed it (admitted only), and Redis's clock at the answer.
	Place      int64
	AdmittedAt time.Time
	Now        time.Time
}

// Stats is a room as a whole, by Redis's clock.
type Stats struct {
	Now      time.Time
	Open     bool    // the doors have opened
	Joined   int64   // the buyers in line: places handed out (before the start, those waiting for the draw)
	Admitted int64   // the places the counter has passed: min(floor(Serving), Joined)
	Serving  float64 // the serving counter itself: it runs past Joined while nobody waits
}

// A Room is the waiting rooms of one deployment: per product, a line of buyers and a serving
// counter in Redis (lua/clock.lua), shared by every instance. Buyers come in at the product's
// admit_per_s for the whole deployment, in the line's order: a random order for those who came
// before the doors opened, arrival order after. No instance drives the counter: it is a
// function of Redis's clock, so an instance killed, paused or restarted changes neither the
// rate nor the order. It is safe for concurrent use; a Room per instance.
type Room struct {
	client   redis.UniversalClient
	passes   *Passes
	prefix   string
	instance string // names this instance's clock, in a planted bug only
}

// NewRoom returns the waiting rooms kept in client, whose passes are signed by passes.
func NewRoom(client redis.UniversalClient, passes *Passes, opts Options) *Room {
	opts = opts.withDefaults()
	return &Room{client: client, passes: passes, prefix: opts.Prefix, instance: randomText(8)}
}

// RoomKeys are the Redis keys of one product's room (lua/clock.lua says what each holds). They
// share the {sku} hash tag, so that they sit in one Redis Cluster slot, as a script over several
// keys requires.
type RoomKeys struct {
	State, Early, Tickets, Places, Admitted, Segments string
}

// Keys returns sku's room keys.
func (r *Room) Keys(sku string) RoomKeys {
	p := r.prefix + "{" + sku + "}:room:"
	return RoomKeys{State: p + "state", Early: p + "early", Tickets: p + "tickets", Places: p + "places", Admitted: p + "admitted",
		Segments: p + "segments"}
}

// all is k in the order of clock.lua's KEYS.
func (k RoomKeys) all() []string {
	return []string{k.State, k.Early, k.Tickets, k.Places, k.Admitted, k.Segments}
}

// Reset empties sku's room, for a new sale round (PUT of the product).
func (r *Room) Reset(ctx context.Context, sku string) error {
	if err := r.client.Del(ctx, r.Keys(sku).all()...).Err(); err != nil {
		return r.down(ctx, sku, err)
	}
	return nil
}

// Join puts buyer in p's line, once: joining again answers the same ticket and place. Before
// the doors open the Wait has no Position and says OpensAt. It returns stock.ErrSoldOut,
// stock.ErrSaleEnded, stock.ErrInvalid or stock.ErrUnavailable (wrapped).
func (r *Room) Join(ctx context.Context, p Product, buyer string) (Wait, error) {
	if err := p.checkBuyer(buyer); err != nil {
		return Wait{}, err
	}
	if p.SoldOut {
		return Wait{}, fmt.Errorf("waiting room of %s: %w", p.SKU, stock.ErrSoldOut)
	}
	score := randomScore()
	if planted.On(planted.EarlyArrivalOrder) {
		score = strconv.FormatInt(time.Now().UnixMicro(), 10)
	}
	res, err := joinScript.Run(ctx, r.client, r.Keys(p.SKU).all(), append(r.args(p), buyer, randomText(16), score)...).Slice()
	if err != nil {
		return Wait{}, r.down(ctx, p.SKU, err)
	}
	switch res[0] {
	case "ended":
		return Wait{}, fmt.Errorf("waiting room of %s: %w", p.SKU, stock.ErrSaleEnded)
	case "early":
		return early(p, res), nil
	}
	return standing(p, res), nil
}

// Poll says where buyer's ticket stands in p's line: waiting, or admitted with a pass (the same
// pass on every poll until it expires; then a new one). Its position never rises. It returns
// stock.ErrNotFound (an unknown ticket, or another buyer's), stock.ErrSoldOut (waiting, and
// p.SoldOut), stock.ErrSaleEnded, stock.ErrInvalid or stock.ErrUnavailable (wrapped).
func (r *Room) Poll(ctx context.Context, p Product, buyer, ticket string) (Wait, error) {
	if err := p.checkBuyer(buyer); err != nil {
		return Wait{}, err
	}
	if ticket == "" {
		return Wait{}, fmt.Errorf("waiting room of %s: ticket: %w", p.SKU, stock.ErrNotFound)
	}
	soldOut := "0"
	if p.SoldOut {
		soldOut = "1"
	}
	ttl := int64(p.Room.WithDefaults().PassTTL / time.Second)
	res, err := pollScript.Run(ctx, r.client, r.Keys(p.SKU).all(), append(r.args(p), buyer, ticket, ttl, soldOut)...).Slice()
	if err != nil {
		return Wait{}, r.down(ctx, p.SKU, err)
	}
	switch res[0] {
	case "unknown":
		return Wait{}, fmt.Errorf("waiting room of %s: ticket: %w", p.SKU, stock.ErrNotFound)
	case "ended":
		return Wait{}, fmt.Errorf("waiting room of %s: %w", p.SKU, stock.ErrSaleEnded)
	case "soldout":
		return Wait{}, fmt.Errorf("waiting room of %s: %w", p.SKU, stock.ErrSoldOut)
	case "early":
		return early(p, res), nil
	case "waiting":
		return standing(p, res), nil
	}
	w := standing(p, res)
	w.AdmittedAt, w.PassExpiresAt = time.UnixMicro(integer(res[6])), time.Unix(integer(res[7]), 0)
	if w.Pass, err = r.passes.issue(ctx, buyer, p.SKU, w.Ticket, w.PassExpiresAt); err != nil {
		return Wait{}, err
	}
	return w, nil
}

// Stats reads p's room as a whole, by Redis's clock (opening its doors if their time has come,
// as every call does).
func (r *Room) Stats(ctx context.Context, p Product) (Stats, error) {
	if err := p.check(); err != nil {
		return Stats{}, err
	}
	res, err := statsScript.Run(ctx, r.client, r.Keys(p.SKU).all(), r.args(p)...).Slice()
	if err != nil {
		return Stats{}, r.down(ctx, p.SKU, err)
	}
	s := Stats{Now: time.UnixMicro(integer(res[1]))}
	if res[0] == "early" {
		s.Joined = integer(res[2])
		return s, nil
	}
	s.Open, s.Serving, s.Joined = true, decimal(res[2]), integer(res[3])
	s.Admitted = min(int64(math.Floor(s.Serving)), s.Joined)
	return s, nil
}

// args are clock.lua's ARGV for p.
func (r *Room) args(p Product) []any {
	own := ""
	if planted.On(planted.AdmissionPerInstance) {
		own = r.instance
	}
	return []any{micros(p.StartsAt), micros(p.EndsAt), p.Room.AdmitPerS, own}
}

// down is err, from Redis, as the room's answer: the request could not be judged, so it is
// refused (unavailable) — never let through.
func (r *Room) down(ctx context.Context, sku string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("waiting room of %s: %w", sku, ctx.Err())
	}
	return fmt.Errorf("waiting room of %s: %w: %w", sku, stock.ErrUnavailable, err)
}

// check refuses a call the room cannot answer: no product, or a room out of bounds.
func (p Product) check() error {
	if p.SKU == "" {
		return &stock.InvalidError{Msg: "a waiting room needs a product"}
	}
	return p.Room.Validate()
}

// checkBuyer is check for a buyer's call: it needs a buyer too.
func (p Product) checkBuyer(buyer string) error {
	if buyer == "" {
		return &stock.InvalidError{Msg: "a waiting room needs a buyer"}
	}
	return p.check()
}

// early is the Wait of a ticket before the doors open: res is {'early', ticket, now}.
func early(p Product, res []any) Wait {
	w := Wait{Ticket: res[1].(string), Now: time.UnixMicro(integer(res[2])), OpensAt: p.StartsAt}
	w.ETA = max(0, p.StartsAt.Sub(w.Now))
	w.PollAfter = min(max(w.ETA, minPollAfter), maxPollAfter)
	return w
}

// standing is the Wait of a ticket in line: res is {kind, ticket, now, place, serving, next, ...}.
func standing(p Product, res []any) Wait {
	w := Wait{Ticket: res[1].(string), Now: time.UnixMicro(integer(res[2])), Place: integer(res[3])}
	serving, next := decimal(res[4]), integer(res[5])
	admitted := min(int64(math.Floor(serving)), next)
	ahead := max(0, w.Place-1-admitted)
	w.Position = &ahead
	if w.Admitted = w.Place <= admitted; w.Admitted {
		w.PollAfter = minPollAfter
		return w
	}
	w.ETA = time.Duration((float64(w.Place) - serving) / float64(p.Room.AdmitPerS) * float64(time.Second))
	w.PollAfter = min(max(w.ETA/2, minPollAfter), maxPollAfter)
	return w
}

// micros is t in microseconds since the epoch, as clock.lua counts time; 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// integer reads a number a script returned, as an integer reply or as text.
func integer(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// decimal reads a real number a script returned as text.
func decimal(v any) float64 {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// randomText is n random bytes, as URL-safe text: a ticket, an instance's name.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// randomScore is an early joiner's draw: 53 random bits, which a Redis sorted set's score (a
// double) holds exactly. Drawn from crypto/rand, so that no buyer can predict or sway it.
func randomScore() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatUint(binary.BigEndian.Uint64(b[:])>>11, 10)
}
