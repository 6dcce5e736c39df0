// Package admission is the Redis reservation ledger in front of a sale: sold-out and repeat
// buyers are answered from Redis, and each admitted order holds a reservation of its units until
// the database decides it. The database is the source of truth; all state here is rebuilt from it.
package admission

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/keyqueue"
	"github.com/flashsale/seckill/internal/stock"
)

// ErrRedisDown marks an admission that could not ask Redis. The hybrid strategy then places the
// order on the database-guarded path alone: slower, still correct.
var ErrRedisDown = errors.New("redis unavailable")

// ErrNotPlaced marks a failure, other than the domain's refusals, that certainly wrote nothing,
// so that its give-back returns the units at once.
var ErrNotPlaced = errors.New("certainly not placed")

// Ledger is the reservation ledger as one instance sees it: per product, a counter pre-deducted
// atomically with the set of buyers (lua/admit.lua), and the reservations of undecided orders.
// A counter above the database is harmless; below it, units would not sell. So an admitted
// order holds a reservation: settled, given back (settle.go), or swept when its instance stops.
type Ledger struct {
	client    redis.UniversalClient
	store     *stock.Store
	log       *slog.Logger
	instance  string        // this instance, as its reservations name it
	ttl       time.Duration // an instance whose last beat is older is not alive
	downUntil atomic.Int64  // unix nanoseconds; Redis is not asked before then
	recent    sync.Map      // sku -> time.Time of its last admission here: the products this instance sweeps
	opts      Options       // Batch at least 1, Clock set

	mu      sync.Mutex
	tracked map[string]time.Time // reservation id -> zero while its order is in flight here; in doubt: when it may be swept

	admits  *keyqueue.Queue[*call]       // by set of SKUs: requests waiting for the next admission call
	handing *keyqueue.Queue[*handedOver] // by SKU: hand-overs waiting for the next call (HandOver)

	results   *prometheus.CounterVec
	givebacks prometheus.Counter
	swept     *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	calls     prometheus.Histogram
}

// Options are a ledger's settings beyond its backends; the zero value is the default.
type Options struct {
	// Batch is how many requests of the same products (or hand-overs), piled up while the last
	// call was out, one call may take; <= 1: one call each.
	Batch int
	// WaitHeld is how long a buyer waits for held units to be decided before hearing busy; 0: not.
	WaitHeld time.Duration
	// Pending is asked before the sweeper returns an orphan's units; nil: only the admitting
	// instance writes an order.
	Pending Pending
	// Clock times the breaker, doubts and watched products, so a test can skip past a bound;
	// nil: time.Now.
	Clock func() time.Time
}

// New returns the admission over client, warming from store. Its reservations name instance
// with a random suffix, new at every start: a restarted process must not take over the dead
// one's reservations. Past ttl after the last Beat the others may sweep them: beat every ttl/4.
func New(client redis.UniversalClient, store *stock.Store, instance string, ttl time.Duration, log *slog.Logger,
	reg prometheus.Registerer, opts Options) *Ledger {
	opts.Batch = max(1, opts.Batch)
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	a := &Ledger{
		client:   client,
		store:    store,
		log:      log,
		instance: strings.ReplaceAll(instance, "|", "_") + "#" + reservationID(), // | separates a reservation's fields
		ttl:      ttl,
		tracked:  map[string]time.Time{},
		opts:     opts,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_admission_total", Help: "Redis admission answers (admitted, sold_out, already_purchased, in_flight, held: too few units left but some held by orders in their sections, answered busy; waiting: a queued order past its product's bound of orders waiting to be written, answered busy) and counters (re)built from the database (warmed).",
		}, []string{"result"}),
		givebacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_admission_givebacks_total", Help: "Admitted orders whose reservation was given back after the database step failed.",
		}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_admission_swept_total", Help: "Reservations resolved by the sweeper after their instance stopped or lost track of them: returned (no order: the units are on sale again), placed (the order exists), or retaken (returned while its frozen instance wrote the order after all: taken again by the settle).",
		}, []string{"result"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_redis_fallbacks_total", Help: "Orders placed on the database-guarded path because Redis was unavailable, by the step that found it so.",
		}, []string{"step"}),
		calls: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seckill_admission_call_buyers", Help: "Buyers answered by one Redis admission call: one per call, unless SECKILL_ADMIT_BATCH lets the buyers who pile up go together.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 8),
		}),
	}
	a.admits, a.handing = keyqueue.New(opts.Batch, inRound(a.admitRound)), keyqueue.New(opts.Batch, inRound(a.handOverRound))
	reg.MustRegister(a.results, a.givebacks, a.swept, a.fallbacks, a.calls)
	return a
}
