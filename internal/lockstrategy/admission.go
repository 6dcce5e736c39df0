package lockstrategy

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/stock"
)

var (
	//go:embed lua/admit.lua
	admitLua string
	//go:embed lua/giveback.lua
	giveBackLua string
	//go:embed lua/warm.lua
	warmLua string

	admitScript    = redis.NewScript(admitLua)
	giveBackScript = redis.NewScript(giveBackLua)
	warmScript     = redis.NewScript(warmLua)
)

// errRedisDown marks an admission that could not ask Redis. The hybrid strategy then places the
// order on the database-guarded path alone: slower, still correct.
var errRedisDown = errors.New("redis unavailable")

// NewRedisClient returns a go-redis client configured the way the strategies need it: context
// deadlines bound socket I/O (go-redis ignores them otherwise), short timeouts, one dial
// attempt (go-redis would retry a refused dial five times, 100 ms apart, and a Redlock try waits
// for its slowest node), and no command retries — a retried admission script after a lost answer
// would see its own first run and call the buyer a repeat buyer.
func NewRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           500 * time.Millisecond,
		DialerRetries:         1,
		DialerRetryTimeout:    10 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            -1,
		PoolSize:              64,
	})
}

// Admission is the Redis fast path of a sale: a counter pre-deducted atomically with the set of
// admitted buyers (one Lua script), so that sold-out and repeat buyers are answered without
// touching a lock or the database. It is an optimisation only: the counter may run above the
// database (over-admission: harmless, the database decides) and is rebuilt from the database
// whenever it is missing — after a flush, a restart, or a reset.
//
// When Redis fails, Admission trips a breaker for a cooldown and reports errRedisDown without
// I/O, so an outage costs one timeout per cooldown, not one per order; after the cooldown the
// next order probes Redis again, and admission resumes by itself.
type Admission struct {
	client    *redis.Client
	store     *stock.Store
	log       *slog.Logger
	cooldown  time.Duration
	downUntil atomic.Int64 // unix nanoseconds; Redis is not asked before then

	results   *prometheus.CounterVec
	givebacks prometheus.Counter
	fallbacks *prometheus.CounterVec
}

// NewAdmission returns the admission over client, warming from store.
func NewAdmission(client *redis.Client, store *stock.Store, log *slog.Logger, reg prometheus.Registerer) *Admission {
	a := &Admission{
		client:   client,
		store:    store,
		log:      log,
		cooldown: time.Second,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_admission_total", Help: "Redis admission answers (admitted, sold_out, already_purchased) and counters (re)built from the database (warmed).",
		}, []string{"result"}),
		givebacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_admission_givebacks_total", Help: "Admitted orders whose pre-deduction was given back after the database step failed.",
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_redis_fallbacks_total", Help: "Orders placed on the database-guarded path because Redis was unavailable, by the step that found it so.",
		}, []string{"step"}),
	}
	reg.MustRegister(a.results, a.givebacks, a.fallbacks)
	return a
}

// keys returns the admission keys of sku. The {sku} hash tag puts all of a product's keys in one
// Redis Cluster slot, which a multi-key script requires.
func keys(sku string) []string {
	return []string{"seckill:{" + sku + "}:stock", "seckill:{" + sku + "}:buyers"}
}

// lockKey is the redsync lock of sku, in the same slot as its admission keys.
func lockKey(sku string) string { return "seckill:{" + sku + "}:lock" }

// Ping checks that Redis answers.
func (a *Admission) Ping(ctx context.Context) error { return a.client.Ping(ctx).Err() }

// available reports whether the breaker lets requests reach Redis.
func (a *Admission) available() bool { return time.Now().UnixNano() >= a.downUntil.Load() }

// down trips the breaker after a Redis error.
func (a *Admission) down(step string, err error) {
	if a.available() {
		a.log.Warn("redis unavailable: orders take the database-guarded path", "step", step, "cooldown", a.cooldown, "err", err)
	}
	a.downUntil.Store(time.Now().Add(a.cooldown).UnixNano())
}

// Admit asks Redis whether req may go on to the lock and the database, pre-deducting its units.
// It returns nil (admitted: the caller must GiveBack if the order then fails), stock.ErrSoldOut,
// stock.ErrAlreadyPurchased, stock.ErrNotFound, or errRedisDown.
func (a *Admission) Admit(ctx context.Context, req stock.OrderRequest) error {
	if !a.available() {
		return errRedisDown
	}
	for warmed := false; ; warmed = true {
		res, err := admitScript.Run(ctx, a.client, keys(req.SKU), req.UserID, req.Quantity).Int()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.down("admission", err)
			return fmt.Errorf("%w: %w", errRedisDown, err)
		}
		switch res {
		case 0:
			a.results.WithLabelValues("admitted").Inc()
			return nil
		case 1:
			a.results.WithLabelValues("sold_out").Inc()
			return fmt.Errorf("admission %s: %w", req.SKU, stock.ErrSoldOut)
		case 2:
			a.results.WithLabelValues("already_purchased").Inc()
			return fmt.Errorf("admission %s/%s: %w", req.SKU, req.UserID, stock.ErrAlreadyPurchased)
		}
		if warmed {
			return fmt.Errorf("admission %s: counter vanished right after warming: %w", req.SKU, errRedisDown)
		}
		if err := a.warm(ctx, req.SKU, "nx"); err != nil {
			return err
		}
	}
}

// warm writes the admission state of sku from the database: mode "nx" only where no counter
// exists (never overwrite a live one), "force" to replace it.
func (a *Admission) warm(ctx context.Context, sku, mode string) error {
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
		a.down("warm", err)
		return fmt.Errorf("warm %s: %w: %w", sku, errRedisDown, err)
	}
	if wrote == 1 {
		a.results.WithLabelValues("warmed").Inc()
	}
	return nil
}

// GiveBack returns an admitted order's units after its database step failed, even when the
// request was cancelled. dbErr is that failure: when the database said sold out, the counter is
// also capped at what the database holds.
func (a *Admission) GiveBack(ctx context.Context, req stock.OrderRequest, dbErr error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	args := []any{req.UserID, req.Quantity}
	var soldOut *stock.SoldOutError
	if errors.As(dbErr, &soldOut) {
		args = append(args, soldOut.Left)
	}
	if err := giveBackScript.Run(ctx, a.client, keys(req.SKU), args...).Err(); err != nil {
		// The counter now runs below the database until it is rebuilt (reconcile, reset, or a
		// lazy warm after Redis loses it): units may go unsold, but none can be oversold.
		a.down("give-back", err)
		a.log.Warn("admission give-back failed; reconcile the product to resync Redis", "sku", req.SKU, "err", err)
		return
	}
	a.givebacks.Inc()
}

// Invalidate deletes sku's admission state before a reset, so that no order is admitted against
// the old round's counter. It fails when Redis cannot be reached: the reset must not go on, or
// the old counter would outlive it.
func (a *Admission) Invalidate(ctx context.Context, sku string) error {
	if err := a.client.Del(ctx, keys(sku)...).Err(); err != nil {
		return fmt.Errorf("invalidate admission of %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	return nil
}

// Reconcile replaces sku's admission state with the database's: the counter becomes the stock,
// the buyer set the users holding orders. Safe at any time: orders in flight can only leave the
// counter above the database afterwards, which the database then corrects.
func (a *Admission) Reconcile(ctx context.Context, sku string) error {
	if err := a.warm(ctx, sku, "force"); err != nil {
		if errors.Is(err, errRedisDown) {
			return fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// Stock reads the admission counter of sku; ok is false when there is none.
func (a *Admission) Stock(ctx context.Context, sku string) (n int64, ok bool, err error) {
	v, err := a.client.Get(ctx, keys(sku)[0]).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
	n, err = strconv.ParseInt(v, 10, 64)
	return n, err == nil, err
}

// fellBack counts an order placed without Redis.
func (a *Admission) fellBack(step string) { a.fallbacks.WithLabelValues(step).Inc() }
