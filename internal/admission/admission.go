// Package admission is the Redis reservation ledger in front of a sale: admit (a counter
// pre-deducted atomically with the set of buyers, one Lua script), give back, settle, sweep the
// reservations of instances that stopped, restock the units of orders that ended — so that
// sold-out and repeat buyers are answered at memory speed, and no unit the database still has
// stays off sale. It is an optimisation only: the database is the source of truth, and every
// decision here can be rebuilt from it.
package admission

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/keyqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

var (
	//go:embed lua/admit.lua
	admitLua string
	//go:embed lua/giveback.lua
	giveBackLua string
	//go:embed lua/settle.lua
	settleLua string
	//go:embed lua/orphans.lua
	orphansLua string
	//go:embed lua/sweep.lua
	sweepLua string
	//go:embed lua/state.lua
	stateLua string
	//go:embed lua/restock.lua
	restockLua string
	//go:embed lua/warm.lua
	warmLua string
	//go:embed lua/beat.lua
	beatLua string
	//go:embed lua/live.lua
	liveLua string
	//go:embed lua/handover.lua
	handOverLua string

	admitScript    = redis.NewScript(admitLua)
	giveBackScript = redis.NewScript(giveBackLua)
	settleScript   = redis.NewScript(settleLua)
	orphansScript  = redis.NewScript(orphansLua)
	sweepScript    = redis.NewScript(sweepLua)
	stateScript    = redis.NewScript(stateLua)
	restockScript  = redis.NewScript(restockLua)
	warmScript     = redis.NewScript(warmLua)
	beatScript     = redis.NewScript(beatLua)
	liveScript     = redis.NewScript(liveLua)
	handOverScript = redis.NewScript(handOverLua)
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

// Cooldown is how long the breaker keeps Redis unasked after an error: an outage costs one
// timeout per cooldown, not one per order.
const Cooldown = time.Second

// sweepGrace is how long a reservation in doubt is left alone: a commit sent before its section
// gave up has long reached the database by then. Doubts older than forgetDoubts are dropped:
// swept, or gone from Redis.
const (
	sweepGrace   = time.Second
	forgetDoubts = time.Minute
)

// instancesKey is the heartbeats of every instance on this Redis (beat.lua).
const instancesKey = "seckill:instances"

// QueueOwner owns the reservations handed over to the order queue (HandOver): alive as long as
// the queue is, which no heartbeat shows — the writer that takes each order's message resolves
// its reservation.
const QueueOwner = "@queue"

// Pending is asked by the sweeper about reservations it found orphaned whose orders the database
// does not have, before it returns their units: it reports those whose orders someone else may
// still write (the queued strategy: the order's message went out), and makes sure no one ever
// writes the others. The sweeper leaves the first kind to their writers (handed over to the
// queue) and returns the units of the rest.
type Pending interface {
	Pending(ctx context.Context, sku string, held []Held) (writable map[string]bool, err error)
}

// Held is a reservation as the sweeper read it.
type Held struct {
	ID, User, IdempotencyKey string
	Units                    int
}

// Expect makes the sweeper ask p before it returns a reservation's units (Pending).
func (a *Ledger) Expect(p Pending) { a.pending = p }

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

// keys returns the admission keys of sku: the counter, the buyers and the reservations (see
// lua/admit.lua). The {sku} hash tag puts all of a product's keys in one Redis Cluster slot,
// which a multi-key script requires.
func keys(sku string) []string {
	p := "seckill:{" + sku + "}:"
	return []string{p + "stock", p + "buyers", p + "reserved", p + "queued"}
}

// Keys are the Redis keys of one product's admission (lua/admit.lua).
type Keys struct {
	Stock    string // the admission counter: the database's stock, minus the reservations
	Buyers   string // the users admitted in this sale round
	Reserved string // the reservations of orders in their sections: user -> reservation id, units, instance, Idempotency-Key
	Queued   string // the same, of reservations handed over to the order queue
}

// KeysOf returns sku's admission keys, for the service to publish (GET .../locks).
func KeysOf(sku string) Keys {
	ks := keys(sku)
	return Keys{Stock: ks[0], Buyers: ks[1], Reserved: ks[2], Queued: ks[3]}
}

// sweptKey is the sweeper's marker of a reservation it returned (lua/sweep.lua).
func sweptKey(sku, reservation string) string { return "seckill:{" + sku + "}:swept:" + reservation }

// withSwept is keys(sku) followed by the sweeper's marker of each reservation.
func withSwept(sku string, reservations []string) []string {
	ks := keys(sku)
	for _, id := range reservations {
		ks = append(ks, sweptKey(sku, id))
	}
	return ks
}

// Beat records that this instance is alive for another TTL (lua/beat.lua): its reservations
// keep their units while its beats are at most the TTL apart.
func (a *Ledger) Beat(ctx context.Context) {
	if err := beatScript.Run(ctx, a.client, []string{instancesKey}, a.instance, a.ttl.Milliseconds()).Err(); err != nil && ctx.Err() == nil {
		a.log.Debug("heartbeat not written; past the instance TTL the others sweep this instance's reservations", "err", err)
	}
}

// Live returns the instances alive now (lua/live.lua), this one among them whatever its last
// beat: it knows its own reservations, and sweeps those it no longer has in flight itself — and
// the order queue (QueueOwner), whose reservations its writers resolve.
func (a *Ledger) Live(ctx context.Context) ([]string, error) {
	ids, err := liveScript.Run(ctx, a.client, []string{instancesKey}).StringSlice()
	if planted.On(planted.EveryoneAlive) {
		ids, err = a.client.ZRange(ctx, instancesKey, 0, -1).Result()
	}
	if err != nil {
		return nil, err
	}
	return append(ids, a.instance, QueueOwner), nil
}

// Available reports whether the breaker lets requests reach Redis.
func (a *Ledger) Available() bool { return a.now().UnixNano() >= a.downUntil.Load() }

// Down trips the breaker after a Redis error at step (the strategy's lock, too).
func (a *Ledger) Down(step string, err error) {
	if a.Available() {
		a.log.Warn("redis unavailable: orders take the database-guarded path", "step", step, "cooldown", a.cooldown, "err", err)
	}
	a.downUntil.Store(a.now().Add(a.cooldown).UnixNano())
}

// Admit asks Redis whether req may go on to the lock and the database, reserving its units
// under req.Reservation.ID, or a random id when it has none (the queued strategy gives its order
// id, which its message and its order record carry, so a sweeper can ask about the order). It
// returns the reservation (the caller must Settle or GiveBack it), or stock.ErrSoldOut (final:
// no unit left, and none held by an order that could give it back), stock.ErrBusy (too few
// units left, but orders in their sections hold some: retry), stock.ErrAlreadyPurchased,
// stock.ErrDuplicateRequest (a request with the same Idempotency-Key holds the buyer's
// reservation: it is in flight), stock.ErrNotFound, or ErrRedisDown. With Options.Batch, the
// buyers of a product that arrive while its last call is out go to Redis together (batch.go).
func (a *Ledger) Admit(ctx context.Context, req stock.OrderRequest) (stock.Reservation, error) {
	return a.AdmitWithin(ctx, req, 0)
}

// AdmitWithin is Admit for an order that waits behind every other of its product (the queued
// strategy's): while the product holds bound reservations or more — orders admitted and not yet
// written or given back, on any instance — it answers stock.ErrBusy, units left or not, so that
// no order waits behind more than bound others. 0: no bound.
func (a *Ledger) AdmitWithin(ctx context.Context, req stock.OrderRequest, bound int) (stock.Reservation, error) {
	if !a.Available() {
		return stock.Reservation{}, ErrRedisDown
	}
	if planted.On(planted.IgnoredWaitingBound) {
		bound = 0
	}
	a.touch(req.SKU)
	res := req.Reservation
	if res.ID == "" {
		res.ID = reservationID()
	}
	// Tracked before Redis has it, so that this instance's sweeper never takes a reservation of
	// an order in flight here for one it lost track of.
	a.track(res.ID, time.Time{})
	b := buyer{req: req, id: res.ID, bound: bound}
	code, err := a.ask(ctx, b)
	heldWait := a.heldWait
	if planted.On(planted.HeldAtOnce) {
		heldWait = 0
	}
	// Held units are decided within a section's time: ask again until they are, and answer
	// busy only once the wait budget ran out. A buyer told busy at once comes back while
	// nobody knows whether a unit is left.
	start := time.Now()
	for pause := time.Millisecond; code == 4 && err == nil && time.Since(start)+pause < heldWait; pause = min(2*pause, 16*time.Millisecond) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(pause/2 + rand.N(pause)):
			code, err = a.ask(ctx, b)
		}
	}
	if code != 0 || err != nil {
		a.Done(res)
	}
	if err != nil {
		return stock.Reservation{}, err
	}
	switch code {
	case 0:
		a.results.WithLabelValues("admitted").Inc()
		return res, nil
	case 1:
		a.results.WithLabelValues("sold_out").Inc()
		return stock.Reservation{}, fmt.Errorf("admission %s: %w", req.SKU, stock.ErrSoldOut)
	case 2:
		a.results.WithLabelValues("already_purchased").Inc()
		return stock.Reservation{}, fmt.Errorf("admission %s/%s: %w", req.SKU, req.UserID, stock.ErrAlreadyPurchased)
	case 3:
		a.results.WithLabelValues("in_flight").Inc()
		return stock.Reservation{}, fmt.Errorf("admission %s/%s: key %q in flight: %w", req.SKU, req.UserID, req.IdempotencyKey,
			stock.ErrDuplicateRequest)
	case 4:
		a.results.WithLabelValues("held").Inc()
		return stock.Reservation{}, stock.Busy(stock.BusyHeld, fmt.Errorf("admission %s: the units left are held by orders in their sections, which may give them back, still after %s",
			req.SKU, heldWait))
	case 5:
		a.results.WithLabelValues("waiting").Inc()
		return stock.Reservation{}, stock.Busy(stock.BusyWaiting, fmt.Errorf("admission %s: %d orders are waiting to be written, the most allowed", req.SKU, bound))
	}
	return stock.Reservation{}, fmt.Errorf("admission %s: answer %d: %w", req.SKU, code, ErrRedisDown)
}

// buyer is one order asking admission: its request, the id of the reservation it takes, and
// the most reservations its product may hold with it (AdmitWithin; 0: no bound).
type buyer struct {
	req   stock.OrderRequest
	id    string
	bound int
}

// admit runs lua/admit.lua once for buyers, all of sku, and returns their answers in order,
// warming the counter from the database first if it is missing.
func (a *Ledger) admit(ctx context.Context, sku string, buyers []buyer) ([]int64, error) {
	args := make([]any, 0, 1+5*len(buyers))
	args = append(args, a.instance)
	for _, b := range buyers {
		args = append(args, b.req.UserID, b.req.Quantity, b.id, b.req.IdempotencyKey, b.bound)
	}
	for warmed := false; ; warmed = true {
		codes, err := admitScript.Run(ctx, a.client, keys(sku), args...).Int64Slice()
		if err == nil && len(codes) != len(buyers) {
			err = fmt.Errorf("%d answers for %d buyers", len(codes), len(buyers))
		}
		if err != nil {
			if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errAdmitSlow) {
				return nil, ctx.Err()
			}
			a.Down("admission", err)
			return nil, fmt.Errorf("%w: %w", ErrRedisDown, err)
		}
		if codes[0] != -1 {
			a.calls.Observe(float64(len(buyers)))
			return codes, nil
		}
		if warmed {
			return nil, fmt.Errorf("admission %s: counter vanished right after warming: %w", sku, ErrRedisDown)
		}
		if err := a.warm(ctx, sku, "nx"); err != nil {
			return nil, err
		}
	}
}

// reservationID is a random id that tells one reservation of a buyer from a later one.
func reservationID() string {
	b := make([]byte, 9)
	_, _ = crand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// touch records that this instance admits orders for sku, so that its sweeper watches it.
// Written at most once a second per SKU: the hot path only reads.
func (a *Ledger) touch(sku string) {
	now := a.now()
	if last, ok := a.recent.Load(sku); ok && now.Sub(last.(time.Time)) < time.Second {
		return
	}
	a.recent.Store(sku, now)
}

// warm writes the admission state of sku from the database: mode "nx" only where no counter
// exists (never overwrite a live one), "force" to replace it.
func (a *Ledger) warm(ctx context.Context, sku, mode string) error {
	p, err := a.store.Product(ctx, sku)
	if err != nil {
		return err
	}
	buyers, err := a.store.Buyers(ctx, sku)
	if err != nil {
		return err
	}
	args := make([]any, 0, len(buyers)+2)
	args = append(args, mode, p.Stock)
	for _, b := range buyers {
		args = append(args, b)
	}
	wrote, err := warmScript.Run(ctx, a.client, keys(sku), args...).Int()
	if err != nil {
		a.Down("warm", err)
		return fmt.Errorf("warm %s: %w: %w", sku, ErrRedisDown, err)
	}
	if wrote == 1 {
		a.results.WithLabelValues("warmed").Inc()
	}
	return nil
}

// Done ends the tracking of a reservation whose order is no longer in flight here: it was
// settled (or, if the settle was lost, will be, by this instance's sweeper), or given back.
func (a *Ledger) Done(res stock.Reservation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.tracked, res.ID)
}

// track records a reservation of an order in flight here (zero until), or in doubt until until.
func (a *Ledger) track(id string, until time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tracked[id] = until
}

// GiveBack returns an admitted order's reservation after its database step failed — for
// certain. It runs even when the request was cancelled. dbErr is the failure: when the database
// said sold out, the counter is also capped at what the database holds. An error that leaves
// the outcome open (a lost connection mid-commit, a deadline mid-write) gives nothing back: the
// reservation is put in doubt instead, and this instance's sweeper asks the database about it
// as soon as any commit in flight must have landed. A give-back that cannot reach Redis leaves
// the reservation to the sweeper too.
func (a *Ledger) GiveBack(ctx context.Context, req stock.OrderRequest, dbErr error) {
	if planted.On(planted.LostGiveBack) {
		a.Done(req.Reservation)
		return
	}
	if !definite(dbErr) {
		a.track(req.Reservation.ID, a.now().Add(sweepGrace))
		a.touch(req.SKU)
		return
	}
	defer a.Done(req.Reservation)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	args := []any{req.UserID, req.Reservation.ID}
	var soldOut *stock.SoldOutError
	if errors.As(dbErr, &soldOut) {
		args = append(args, soldOut.Left)
	}
	if err := giveBackScript.Run(ctx, a.client, withSwept(req.SKU, []string{req.Reservation.ID}), args...).Err(); err != nil {
		a.Down("give-back", err)
		a.log.Warn("admission give-back failed; the sweeper returns the units", "sku", req.SKU, "err", err)
		return
	}
	a.givebacks.Inc()
}

// sweepable reports whether this instance's sweeper may resolve its own reservation id: not in
// flight here, and not in doubt within the grace.
func (a *Ledger) sweepable(id string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, tracked := a.tracked[id]
	return !tracked || !until.IsZero() && now.After(until)
}

// forget drops doubts past the grace of the reservations ids (swept now) and those older than
// forgetDoubts (gone from Redis: settled, given back or swept elsewhere).
func (a *Ledger) forget(ids []string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if until, ok := a.tracked[id]; ok && !until.IsZero() && now.After(until) {
			delete(a.tracked, id)
		}
	}
	for id, until := range a.tracked {
		if !until.IsZero() && now.Sub(until) > forgetDoubts {
			delete(a.tracked, id)
		}
	}
}

// definite reports whether a failed order was certainly not written: the database or the lock
// refused it, or the strategy says so (ErrNotPlaced). Anything else — a lost connection, a deadline, an internal error — may have come
// after a COMMIT the database executed.
func definite(err error) bool {
	for _, e := range []error{stock.ErrSoldOut, stock.ErrAlreadyPurchased, stock.ErrDuplicateRequest, stock.ErrBusy,
		stock.ErrInvalid, stock.ErrNotFound, ErrNotPlaced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Settle ends the reservations of orders the database has written: their units stay sold. One
// the sweeper returned meanwhile (this instance was frozen past its heartbeat) is taken again
// (lua/settle.lua). A lost settle costs nothing but time: once the order is Done here, this
// instance's sweeper finds it and settles the reservation.
func (a *Ledger) Settle(ctx context.Context, sku string, reqs []stock.OrderRequest, placed []stock.Placed) {
	var ids []string
	args := make([]any, 0, 3*len(reqs))
	for i, r := range reqs {
		if r.Reservation.ID != "" && placed[i].Err == nil {
			ids = append(ids, r.Reservation.ID)
			args = append(args, r.UserID, r.Reservation.ID, r.Quantity)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	ks := withSwept(sku, ids)
	if planted.On(planted.SettleWithoutTakeBack) {
		ks = append(keys(sku), make([]string, len(ids))...)
		for i, id := range ids {
			ks[4+i] = sweptKey(sku, id) + ":unread"
		}
	}
	out, err := settleScript.Run(ctx, a.client, ks, args...).Int64Slice()
	if err != nil {
		a.log.Debug("settle failed; the sweeper settles", "sku", sku, "err", err)
		return
	}
	if out[1] > 0 {
		a.swept.WithLabelValues("retaken").Add(float64(out[1]))
		a.log.Warn("orders written after the sweeper returned their reservations (this instance was frozen): their units taken again",
			"sku", sku, "orders", out[1])
	}
}

// Sweep resolves sku's reservations whose instance is not alive (live), and this instance's own
// of no order in flight here (sweepable), as the database decides: an order was placed under it (whatever its
// state now: one cancelled since gave its units back itself) — the reservation is settled; none —
// its units and its buyer go back to admission, unless another may still write the order
// (Pending: the queued strategy's message went out), which then resolves it. It returns the units returned. Any
// instance may sweep any product at any time: each reservation is resolved once (lua/sweep.lua).
// live is the instances alive now (Live), read once for every product of a sweep.
func (a *Ledger) Sweep(ctx context.Context, sku string, live []string) (int64, error) {
	if planted.On(planted.NoSweep) {
		return 0, nil
	}
	const batch = 500
	args := make([]any, 0, len(live)+2)
	args = append(args, batch, a.instance)
	for _, id := range live {
		args = append(args, id)
	}
	raw, err := orphansScript.Run(ctx, a.client, []string{keys(sku)[2]}, args...).StringSlice()
	if err != nil {
		return 0, err
	}
	// raw holds each user once (a hash's fields): user, reservation as stored, ...
	now := a.now()
	var users, helds, ids []string
	for i := 0; i+1 < len(raw); i += 2 {
		if id := reservationOf(raw[i+1]); instanceOf(raw[i+1]) != a.instance || a.sweepable(id, now) {
			users, helds, ids = append(users, raw[i]), append(helds, raw[i+1]), append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	placed, err := a.store.Placed(ctx, ids)
	if err != nil {
		return 0, err
	}
	if users, helds, ids, err = a.leaveWritable(ctx, sku, users, helds, ids, placed); err != nil || len(ids) == 0 {
		return 0, err
	}
	args = make([]any, 0, 3*len(users))
	for i, user := range users {
		flag := "0"
		if placed[ids[i]] {
			flag = "1"
		}
		args = append(args, user, helds[i], flag)
	}
	out, err := sweepScript.Run(ctx, a.client, withSwept(sku, ids), args...).Int64Slice()
	if err != nil {
		return 0, err
	}
	a.forget(ids, now)
	units := out[0]
	a.swept.WithLabelValues("returned").Add(float64(out[1]))
	a.swept.WithLabelValues("placed").Add(float64(out[2]))
	a.swept.WithLabelValues("retaken").Add(float64(out[3]))
	if units > 0 {
		a.log.Warn("reservations without an order returned to sale", "sku", sku, "units", units)
	}
	return units, nil
}

// leaveWritable takes out of a sweep the reservations without an order whose orders may still
// be written by another (Pending), and hands them over to the queue, whose writers resolve them.
// Without an answer from Pending, none of them is returned this time.
func (a *Ledger) leaveWritable(ctx context.Context, sku string, users, helds, ids []string, placed map[string]bool) ([]string, []string, []string, error) {
	if a.pending == nil {
		return users, helds, ids, nil
	}
	var open []Held
	for i, id := range ids {
		if !placed[id] {
			f := strings.SplitN(helds[i], "|", 4)
			units, _ := strconv.Atoi(f[1])
			open = append(open, Held{ID: id, User: users[i], Units: units, IdempotencyKey: f[3]})
		}
	}
	if len(open) == 0 {
		return users, helds, ids, nil
	}
	writable, err := a.pending.Pending(ctx, sku, open)
	if err != nil {
		a.log.Debug("orders of orphaned reservations not asked about; their units wait for the next sweep", "sku", sku, "err", err)
		writable = map[string]bool{}
		for _, h := range open {
			writable[h.ID] = true
		}
	}
	var keepU, keepH, keepI, handU, handI []string
	for i, id := range ids {
		if writable[id] {
			handU, handI = append(handU, users[i]), append(handI, id)
		} else {
			keepU, keepH, keepI = append(keepU, users[i]), append(keepH, helds[i]), append(keepI, id)
		}
	}
	if len(handI) > 0 && err == nil {
		if err := a.handOver(ctx, sku, handU, handI); err != nil {
			return nil, nil, nil, err
		}
	}
	return keepU, keepH, keepI, nil
}

// HandOver gives the reservations of reqs to the order queue (lua/handover.lua): their orders'
// messages went out, and the writer that takes each resolves it, whichever instance it runs on —
// the sweeper never returns their units, even once this instance is gone. A hand-over that
// fails is done by the sweeper instead, once Pending confirms the message went out. With
// Options.Batch n, the hand-overs of one order each that arrive while the product's last one is out
// wait for it and then go together, up to n in one call, as admission's buyers do.
func (a *Ledger) HandOver(ctx context.Context, sku string, reqs []stock.OrderRequest) error {
	users, ids := make([]string, len(reqs)), make([]string, len(reqs))
	for i, r := range reqs {
		users[i], ids[i] = r.UserID, r.Reservation.ID
	}
	if a.batch <= 1 || len(reqs) != 1 {
		return a.handOver(ctx, sku, users, ids)
	}
	h := &handedOver{user: users[0], id: ids[0], done: make(chan struct{})}
	if err := a.handing.Await(ctx, sku, h, h.done); err != nil {
		return err
	}
	return h.err
}

// handedOver is one hand-over waiting for its product's next call.
type handedOver struct {
	user, id string
	err      error
	done     chan struct{}
}

// handOverRound is one hand-over call for the hand-overs of sku waiting in the queue.
func (a *Ledger) handOverRound(sku string, take func() []*handedOver) {
	hs := take()
	if len(hs) == 0 {
		return
	}
	ctx, cancel := roundContext()
	defer cancel()
	users, ids := make([]string, len(hs)), make([]string, len(hs))
	for i, h := range hs {
		users[i], ids[i] = h.user, h.id
	}
	err := a.handOver(ctx, sku, users, ids)
	for _, h := range hs {
		h.err = err
		close(h.done)
	}
}

func (a *Ledger) handOver(ctx context.Context, sku string, users, ids []string) error {
	args := make([]any, 0, 1+2*len(users))
	args = append(args, QueueOwner)
	for i := range users {
		args = append(args, users[i], ids[i])
	}
	if err := handOverScript.Run(ctx, a.client, keys(sku)[2:], args...).Err(); err != nil {
		return fmt.Errorf("hand over reservations of %s: %w: %w", sku, ErrRedisDown, err)
	}
	return nil
}

// Restock gives admission the units of sku's orders that the database has ended (cancelled,
// expired) and their buyers back, once per order however often it is called (lua/restock.lua),
// and returns the units returned.
func (a *Ledger) Restock(ctx context.Context, sku string, ended []stock.Order) (int64, error) {
	k := keys(sku)
	ks := append([]string{k[0], k[1]}, make([]string, 0, len(ended))...)
	args := make([]any, 0, 2*len(ended))
	for _, o := range ended {
		ks = append(ks, "seckill:{"+sku+"}:returned:"+o.OrderID)
		args = append(args, o.UserID, o.Quantity)
	}
	n, err := restockScript.Run(ctx, a.client, ks, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("restock %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	return n, nil
}

// Held reads the reservation user holds for sku: stock.ErrNotFound when there is none.
func (a *Ledger) Held(ctx context.Context, sku, user string) (Held, error) {
	held, err := a.client.HGet(ctx, keys(sku)[3], user).Result()
	if errors.Is(err, redis.Nil) {
		held, err = a.client.HGet(ctx, keys(sku)[2], user).Result()
	}
	if errors.Is(err, redis.Nil) {
		return Held{}, fmt.Errorf("reservation of %s/%s: %w", sku, user, stock.ErrNotFound)
	}
	if err != nil {
		return Held{}, fmt.Errorf("reservation of %s/%s: %w: %w", sku, user, stock.ErrUnavailable, err)
	}
	h, ok := parseHeld(user, held)
	if !ok {
		return Held{}, fmt.Errorf("reservation of %s/%s: %q: %w", sku, user, held, stock.ErrNotFound)
	}
	return h, nil
}

// Reservations lists every reservation of sku: those in flight and those handed over to the
// order queue.
func (a *Ledger) Reservations(ctx context.Context, sku string) ([]Held, error) {
	ks := keys(sku)
	pipe := a.client.Pipeline()
	reserved, queued := pipe.HGetAll(ctx, ks[2]), pipe.HGetAll(ctx, ks[3])
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reservations of %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	var out []Held
	for _, hash := range []map[string]string{reserved.Val(), queued.Val()} {
		for user, held := range hash {
			if h, ok := parseHeld(user, held); ok {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

// parseHeld reads user's reservation as admit.lua stores it: id, units, instance, key.
func parseHeld(user, held string) (Held, bool) {
	f := strings.SplitN(held, "|", 4)
	if len(f) != 4 {
		return Held{}, false
	}
	units, _ := strconv.Atoi(f[1])
	return Held{ID: f[0], User: user, Units: units, IdempotencyKey: f[3]}, true
}

// reservationOf is the reservation id of a reservation as admit.lua stores it.
func reservationOf(held string) string {
	id, _, _ := strings.Cut(held, "|")
	return id
}

// instanceOf is the instance of a reservation as admit.lua stores it.
func instanceOf(held string) string {
	if f := strings.SplitN(held, "|", 4); len(f) == 4 {
		return f[2]
	}
	return ""
}

// RecentWindow is how long after its last order here a product is watched by this instance: swept,
// reported by its stranded-units gauge, checked for lost queue messages. Recent prunes older
// products, so every caller asks with it.
const RecentWindow = time.Minute

// Recent lists the products this instance admitted orders for within the window: the ones its
// sweeper watches. Older entries are forgotten.
func (a *Ledger) Recent(window time.Duration) []string {
	var out []string
	now := a.now()
	a.recent.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > window {
			a.recent.Delete(k)
		} else {
			out = append(out, k.(string))
		}
		return true
	})
	return out
}

// State is sku's admission state in Redis, for the audit.
type State struct {
	Stock        *int64 // the counter; nil when there is none
	Reservations int64  // reservations in flight: admitted, neither settled, given back nor swept
	Reserved     int64  // their units
	Live         int64  // the units of those whose instance is alive
}

// State reads sku's admission state in one step; live is the instances alive now (Live), read
// once for every product a caller asks about.
func (a *Ledger) State(ctx context.Context, sku string, live []string) (State, error) {
	args := make([]any, len(live))
	for i, id := range live {
		args[i] = id
	}
	k := keys(sku)
	v, err := stateScript.Run(ctx, a.client, []string{k[0], k[2], k[3]}, args...).Slice()
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
	var st State
	if s, ok := v[0].(string); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return State{}, err
		}
		st.Stock = &n
	}
	st.Reservations, _ = v[1].(int64)
	st.Reserved, _ = v[2].(int64)
	st.Live, _ = v[3].(int64)
	return st, nil
}

// Invalidate deletes sku's admission state — counter, buyers, reservations — before a reset, so
// that no order is admitted against the old round's counter. It fails when Redis cannot be reached: the reset must not go on, or
// the old counter would outlive it.
func (a *Ledger) Invalidate(ctx context.Context, sku string) error {
	if err := a.client.Del(ctx, keys(sku)...).Err(); err != nil {
		return fmt.Errorf("invalidate admission of %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	return nil
}

// Reconcile replaces sku's admission state with the database's: the counter becomes the stock,
// the buyer set the users holding orders. Safe at any time: orders in flight can only leave the
// counter above the database afterwards, which the database then corrects.
func (a *Ledger) Reconcile(ctx context.Context, sku string) error {
	if err := a.warm(ctx, sku, "force"); err != nil {
		if errors.Is(err, ErrRedisDown) {
			return fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// FellBack counts an order placed without Redis, by the step that found it down.
func (a *Ledger) FellBack(step string) { a.fallbacks.WithLabelValues(step).Inc() }
