// Package admission is the Redis reservation ledger in front of a sale: admit (a counter
// pre-deducted atomically with the set of buyers, one Lua script), give back, settle, sweep the
// reservations of instances that stopped, restock the units of orders that ended — so that
// sold-out and repeat buyers are answered at memory speed, and no unit the database still has
// stays off sale. It is an optimisation only: the database is the source of truth, and every
// decision here can be rebuilt from it.
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

// ErrNotPlaced marks a failure that certainly wrote nothing, beside the domain's refusals
// (definite): a strategy wraps it into such an error of its own (a request that gave up before
// any section took it), so that its give-back returns the units at once.
var ErrNotPlaced = errors.New("certainly not placed")

// Ledger is the Redis fast path of a sale: a counter pre-deducted atomically with the set of
// admitted buyers (one Lua script), so that sold-out and repeat buyers are answered without
// touching a lock or the database. It is an optimisation only: the counter may run above the
// database (over-admission: harmless, the database decides) and is rebuilt from the database
// whenever it is missing — after a flush, a restart, or a reset.
//
// It must never run below the database for long, or units the database still has would not
// sell (stranded stock, the classic flash-sale bug: Redis deducted, then the process died before
// the database). So an admitted order holds a reservation: settled once the database has its
// order, given back when the database step fails, and otherwise swept, as the database says
// whether the order exists (Sweep). A reservation lives as long as the instance that made it
// shows it is alive — a heartbeat every InstanceTTL/4 (Beat), not a fixed lease per order — so
// a live instance with a slow database keeps its reservations however long its section takes,
// and a dead or frozen one (SIGKILL, SIGSTOP, a VM paused) loses them to the other instances'
// sweepers within InstanceTTL and a sweep: the last units of a sale are never stuck behind a
// process that stopped. A frozen instance may wake and write an order whose reservation was
// swept: the database's guard decides that write as any other (the unit may be sold by then),
// and the settle takes the swept units back, once, so the counter stays exact. A live instance
// sweeps its own reservations too, those of no order it still has in flight: a give-back or a
// settle that could not reach Redis, or one a failover lost (a replica promoted without the
// write); one whose order's outcome is in doubt only once any commit in flight must have landed.
//
// Sold out is final: while too few units are left but orders in their sections still hold some,
// admission answers busy, not sold out, because such an order may fail and give its units back
// — to a buyer who came later than those told sold out. The last units of a sale are held for a
// section's time at most, or until a sweep: busy, then the truth.
//
// The queued strategy's orders are written by whichever instance's writer takes their message,
// not by the instance that admitted them: once the message is out, a reservation is handed over
// to the queue (HandOver), whose writers settle it or give it back, and the sweeper asks the
// queue (Pending) before it returns the units of one its instance left behind.
//
// When Redis fails, Ledger trips a breaker for a cooldown and reports ErrRedisDown without
// I/O, so an outage costs one timeout per cooldown, not one per order; after the cooldown the
// next order probes Redis again, and admission resumes by itself.
type Ledger struct {
	client    redis.UniversalClient
	store     *stock.Store
	log       *slog.Logger
	cooldown  time.Duration
	instance  string        // this instance, as its reservations name it
	ttl       time.Duration // an instance whose last beat is older is not alive
	downUntil atomic.Int64  // unix nanoseconds; Redis is not asked before then
	recent    sync.Map      // sku -> time.Time of its last admission here: the products this instance sweeps

	heldWait time.Duration // how long a buyer waits for held units to be decided (Options.WaitHeld)

	mu      sync.Mutex
	tracked map[string]time.Time // reservation id -> zero while its order is in flight here; in doubt: when it may be swept
	pending Pending              // nil: no order is written by anyone but its admitting instance

	batch   int                          // buyers of a product one admission call may take, and hand-overs one call may carry (Options.Batch)
	admits  *keyqueue.Queue[*call]       // by SKU: buyers waiting for the next admission call
	handing *keyqueue.Queue[*handedOver] // by SKU: hand-overs waiting for the next call (HandOver)

	results   *prometheus.CounterVec
	givebacks prometheus.Counter
	swept     *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	calls     prometheus.Histogram

	now func() time.Time // times the breaker, the products watched and the doubts' grace (Options.Clock)
}

// Options are a ledger's settings beyond its backends; the zero value is the default.
type Options struct {
	// Batch is how many buyers of a product one admission call may take, those who pile up
	// while its last call is out, and how many hand-overs one call may carry; <= 1: one call each.
	Batch int
	// WaitHeld is how long a buyer who finds the units left held by orders in their sections
	// waits for them to be decided, asking again, before it is answered busy; 0: at once.
	WaitHeld time.Duration
	// Clock times the breaker's cooldown, the grace of a reservation in doubt and the products
	// watched, so that a test can move past a bound instead of waiting it out; nil: time.Now.
	Clock func() time.Time
}

// withDefaults is o with every unset field at its default.
func (o Options) withDefaults() Options {
	o.Batch = max(1, o.Batch)
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// New returns the admission over client, warming from store. Its reservations name
// instance with a random suffix, new at every start: a restarted process must not take over the
// reservations of the one that died, whose orders only the database can decide. ttl is how long
// after this instance's last heartbeat the others may sweep its reservations; Beat must be called
// every ttl/4 or so, from before the first order.
func New(client redis.UniversalClient, store *stock.Store, instance string, ttl time.Duration, log *slog.Logger,
	reg prometheus.Registerer, opts Options) *Ledger {
	opts = opts.withDefaults()
	a := &Ledger{
		client:   client,
		store:    store,
		log:      log,
		cooldown: Cooldown,
		instance: strings.ReplaceAll(instance, "|", "_") + "#" + reservationID(), // | separates a reservation's fields
		ttl:      ttl,
		tracked:  map[string]time.Time{},
		batch:    opts.Batch,
		heldWait: opts.WaitHeld,
		now:      opts.Clock,
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
	}
	a.admits, a.handing = keyqueue.New(a.batch, a.admitRound), keyqueue.New(a.batch, a.handOverRound)
	a.calls = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "seckill_admission_call_buyers", Help: "Buyers answered by one Redis admission call: one per call, unless SECKILL_ADMIT_BATCH lets the buyers who pile up go together.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8),
	})
	reg.MustRegister(a.results, a.givebacks, a.swept, a.fallbacks, a.calls)
	return a
}
