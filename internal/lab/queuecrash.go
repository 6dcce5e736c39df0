package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/buyer"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// queueCrash is the classic bug of the flash-sale queue pipeline (issue 24): pre-deduct the stock
// in Redis, tell the buyer yes, then put the order on a queue for a writer to place — and the
// process dies between the decrement and the send. The unit is gone from sale, the buyer was told
// yes, no order exists, and nothing brings the unit back: Redis counts it sold, the database never
// heard of it. The fix is the project's queued strategy, run as cmd/api runs it: the reservation
// lives on its instance's heartbeat lease, so a crashed instance's units are swept back within
// the lease; a message that went out late is dropped by its order's first record, and one sent
// twice by its message id; the buyer hears 202 only once the message is out. The crash points are
// the strategy's own tests' (TestQueuedCrashBeforePublish): admitted and never published, and
// admitted and published only after the lease lapsed (a frozen instance that wakes).
func queueCrash() Experiment {
	return Experiment{
		Name: "queue-crash",
		Seed: "the flash-sale queue pipeline (issue 24): pre-deduct in Redis, enqueue, write asynchronously",
		Claim: "A process that dies between the Redis pre-deduction and the send strands the units it took, its buyers told yes and no order ever written; " +
			"a reservation on the instance's heartbeat lease brings them back, and the message id and the order's first record keep every order placed once.",
		Fix: `_, err := s.admission.AdmitOnce(ctx, e.lines, s.opts.MaxWaiting) // a reservation on this instance's lease; then Publish(ctx, b) (the batch's id its message id), Record, then 202`,
		Run: runQueueCrash,
	}
}

// queueCrashBound is how long the units of a crashed instance may take to come back: the
// contract's bound for every 202 to end after a fault.
const queueCrashBound = 10 * time.Second

func runQueueCrash(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	units := pick(env.Size, 12, 60)
	lease := pick(env.Size, 500*time.Millisecond, 2*time.Second)
	// Every third buyer's order is on the instance that crashes.
	crashed := func(b int) bool { return b%3 == 0 }
	failing, err := preDeductThenEnqueue(ctx, env, env.key("queue-crash", "failing"), units, crashed, 2*lease+time.Second)
	if err != nil {
		return Result{}, fmt.Errorf("pre-deduct, then enqueue: %w", err)
	}
	fixed, err := queuedCrash(ctx, env, env.key("queue-crash", "queued"), units, crashed, lease)
	if err != nil {
		return Result{}, fmt.Errorf("queued: %w", err)
	}
	// A late message placed after its units went back would sell them twice: once to it, once
	// to whoever buys them again. A re-sent message the queue kept would be a second delivery
	// of its order, left to the writer's database check alone.
	fixedFailed := fixed.stranded > 0 || fixed.twice > 0 || fixed.latePlaced > 0 || fixed.duplicates < fixed.resent || fixed.unended > 0 ||
		!fixed.audit.Consistent() || fixed.back > queueCrashBound
	return Result{
		Failing: Outcome{Form: "DECRBY in Redis, yes to the buyer, then the message; the process dies before the send",
			Happened: fmt.Sprintf("%d buyers told yes, %d orders written, %d units stranded (the database has them, Redis sells none) %.1f s after the crash; %s",
				failing.toldYes, failing.audit.Orders, failing.stranded, failing.waited.Seconds(), column(failing.audit)),
			Failed: failing.stranded > 0},
		Fixed: Outcome{Form: fmt.Sprintf("queued: a reservation on the instance's lease (%s), 202 after the publish", lease),
			Happened: fmt.Sprintf("%d of %d buyers heard 202, the rest were on the crashed instance; their %d units back on sale %.2f s after its last heartbeat (bound %s), %d stranded; "+
				"%d of %d 202s ended (%d placed); %d re-sent messages, %d dropped by the message id; %d late messages of the crashed instance, their orders placed %d times; "+
				"%d orders placed twice; %s",
				fixed.accepted, units, fixed.crashed, fixed.back.Seconds(), queueCrashBound, fixed.stranded,
				fixed.accepted-fixed.unended, fixed.accepted, fixed.placed, fixed.resent, fixed.duplicates, fixed.late, fixed.latePlaced,
				fixed.twice, column(fixed.audit.Audit)),
			Failed: fixedFailed},
		Chart: Chart{Title: fmt.Sprintf("Units stranded, orders placed twice, and seconds until the units were back, %d of %d buyers' instance crashed before its publish", fixed.crashed, units),
			Bars: []Bar{
				{Label: "pre-deduct, then enqueue: units stranded", Value: float64(failing.stranded), Failed: failing.stranded > 0},
				{Label: "queued: units stranded", Value: float64(fixed.stranded), Failed: fixed.stranded > 0},
				{Label: "queued: orders placed twice", Value: float64(fixed.twice), Failed: fixed.twice > 0},
				{Label: "queued: s until the units were back on sale", Value: fixed.back.Seconds(), Failed: fixed.back > queueCrashBound},
			}},
	}, nil
}

// naiveSale is what the pre-deduct-then-enqueue form left behind.
type naiveSale struct {
	toldYes  int
	stranded int64 // units the database has and Redis does not sell
	waited   time.Duration
	audit    stock.Audit
}

// preDeductThenEnqueue is the classic pipeline: a Redis counter decremented for each buyer, the
// buyer told yes, and the order pushed on a list that a writer drains into the database. The
// buyers for whom crashed says so are served by a process that dies after its DECRBY and before
// its push. It waits for long enough for any mechanism to bring the units back — there is none —
// and compares the counter with the database.
func preDeductThenEnqueue(ctx context.Context, env *Env, sku string, units int, crashed func(int) bool, wait time.Duration) (naiveSale, error) {
	counter, queue := sku+":stock", sku+":orders"
	defer env.Redis.Del(context.WithoutCancel(ctx), counter, queue)
	if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: int64(units), MaxPerOrder: 1}); err != nil {
		return naiveSale{}, err
	}
	if err := env.Redis.Set(ctx, counter, units, 0).Err(); err != nil {
		return naiveSale{}, err
	}
	var (
		mu   sync.Mutex
		out  naiveSale
		errs []error
		wg   sync.WaitGroup
	)
	start := make(chan struct{})
	for b := range units {
		wg.Go(func() {
			<-start
			left, err := env.Redis.DecrBy(ctx, counter, 1).Result()
			soldOut := err == nil && left < 0
			if soldOut {
				err = env.Redis.IncrBy(ctx, counter, 1).Err()
			}
			if err == nil && !soldOut && !crashed(b) {
				var msg []byte
				msg, err = json.Marshal(stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("buyer-%d", b), Quantity: 1})
				if err == nil {
					err = env.Redis.RPush(ctx, queue, msg).Err()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case !soldOut:
				out.toldYes++ // a crashed process's buyer too: told yes before the send
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return naiveSale{}, err
	}
	crash := time.Now()
	if err := drain(ctx, env, queue); err != nil {
		return naiveSale{}, err
	}
	select {
	case <-time.After(time.Until(crash.Add(wait))):
	case <-ctx.Done():
		return naiveSale{}, ctx.Err()
	}
	out.waited = time.Since(crash)
	left, err := env.Redis.Get(ctx, counter).Int64()
	if err != nil {
		return naiveSale{}, err
	}
	if out.audit, err = env.Store.Audit(ctx, sku); err != nil {
		return naiveSale{}, err
	}
	out.stranded = max(0, out.audit.Stock-left)
	return out, nil
}

// drain is the pipeline's writer: it takes every order on the list and places them in one
// version-guarded write.
func drain(ctx context.Context, env *Env, queue string) error {
	msgs, err := env.Redis.LPopCount(ctx, queue, 1<<16).Result()
	if err != nil || len(msgs) == 0 {
		return err
	}
	reqs := make([]stock.CheckoutRequest, len(msgs))
	for i, m := range msgs {
		var req stock.OrderRequest
		if err := json.Unmarshal([]byte(m), &req); err != nil {
			return err
		}
		reqs[i] = stock.OrderOf(req)
	}
	reads, err := env.Store.Reads(ctx, []string{reqs[0].Lines[0].SKU})
	if err != nil {
		return err
	}
	placed, err := env.Store.PlaceAt(ctx, reqs, reads)
	if err != nil {
		return err
	}
	for _, p := range placed {
		if p.Err != nil {
			return p.Err
		}
	}
	return nil
}

// queuedSale is what the queued strategy did around the crashed instance.
type queuedSale struct {
	accepted, crashed, unended, placed int
	resent, duplicates                 int
	late, latePlaced                   int
	stranded, twice                    int64
	back                               time.Duration // from the crashed instance's last heartbeat to its units back on sale
	audit                              service.Audit
}

// queuedCrash sells units on a queued service instance, app.Open's as cmd/api's; the buyers for
// whom crashed says so are admitted by an instance that beats once and stops before its publish,
// its ledger as a live instance's (the strategy's tests' crash point). It re-sends every accepted
// order's message, waits for the crashed instance's units to come back and for every 202 to end,
// then has half of the crashed instance's orders published late, as a frozen instance that wakes
// would, and audits.
func queuedCrash(ctx context.Context, env *Env, sku string, units int, crashed func(int) bool, lease time.Duration) (queuedSale, error) {
	cfg := labConfig("queued")
	cfg.InstanceTTL = lease
	c := env.config(cfg)
	if len(c.Queue.URLs) == 0 {
		// The instance's embedded NATS server, on a store of the experiment's, which the
		// crashed instance's queue joins (orderqueue.Queue.embed) as a second process would.
		dir, err := env.queueDir(env.key("queue-crash", "queue"))
		if err != nil {
			return queuedSale{}, err
		}
		c.Queue.DataDir = dir
	}
	live, err := env.newInstance(ctx, c)
	if err != nil {
		return queuedSale{}, err
	}
	defer live.close()
	q, err := orderqueue.Open(ctx, c.Queue, env.Log, prometheus.NewRegistry())
	if err != nil {
		return queuedSale{}, err
	}
	defer q.Close()
	if _, err := live.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: int64(units), MaxPerOrder: 1}); err != nil {
		return queuedSale{}, err
	}
	dead := admission.New(env.Redis, env.Store, env.key("queue-crash", "crashed"), lease, env.Log, prometheus.NewRegistry(), admission.Options{})
	lastBeat := time.Now()
	dead.Beat(ctx)

	var (
		mu       sync.Mutex
		out      queuedSale
		accepted []stock.Order
		stopped  []orderqueue.Batch // each crashed order in its batch, which it never published
		errs     []error
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for b := range units {
		wg.Go(func() {
			<-start
			user := fmt.Sprintf("buyer-%d", b)
			if crashed(b) {
				batch := orderqueue.NewBatch(sku)
				id := batch.NewID()
				req := stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued", OrderID: id, Reservation: stock.Reservation{ID: id}}
				_, err := dead.Admit(ctx, []stock.OrderRequest{req}, 0)
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err)
				batch.Orders = []orderqueue.Order{{OrderID: id, SKU: sku, UserID: user, Strategy: "queued", Reservation: id, AcceptedAt: time.Now().UTC(),
					Lines: []orderqueue.Line{{OrderID: id, SKU: sku, Quantity: 1}}}}
				stopped = append(stopped, batch)
				return
			}
			out, err := buyer.Buyer{ID: b, Places: []buyer.Place{live.PlaceOrder}}.Buy(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued"})
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, cmp.Or(err, out.Err))
			if out.Err == nil {
				accepted = append(accepted, out.Order)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return queuedSale{}, err
	}
	out.accepted, out.crashed = len(accepted), len(stopped)

	// A publisher whose answer was lost sends its batch again, with the same id: JetStream drops
	// it.
	for _, o := range accepted {
		batch, _ := orderqueue.BatchOf(o.OrderID)
		dup, err := q.Publish(ctx, orderqueue.Batch{ID: batch, SKU: sku, Orders: []orderqueue.Order{{OrderID: o.OrderID, SKU: sku,
			UserID: o.UserID, Strategy: "queued", Reservation: o.OrderID, AcceptedAt: o.CreatedAt,
			Lines: []orderqueue.Line{{OrderID: o.OrderID, SKU: sku, Quantity: o.Quantity}}}}})
		if err != nil {
			return queuedSale{}, err
		}
		out.resent++
		if dup {
			out.duplicates++
		}
	}
	if out.back, err = settle(ctx, live, sku, lastBeat); err != nil {
		return queuedSale{}, err
	}
	deadline := time.Now().Add(queueCrashBound)
	for _, o := range accepted {
		got, err := live.Wait(ctx, stock.OrderRef(o.OrderID), max(time.Millisecond, time.Until(deadline)))
		switch {
		case err != nil:
			return queuedSale{}, err
		case got.Status == stock.Queued:
			out.unended++
		case got.Status.Active():
			out.placed++
		}
	}

	// The crashed instance was only frozen: it wakes and publishes half of its orders.
	var lateIDs []string
	for _, b := range stopped[:len(stopped)/2] {
		if _, err := q.Publish(ctx, b); err != nil {
			return queuedSale{}, err
		}
		lateIDs = append(lateIDs, b.Orders[0].OrderID)
	}
	out.late = len(lateIDs)
	if _, err := settle(ctx, live, sku, time.Now()); err != nil {
		return queuedSale{}, err
	}
	placed, err := env.Store.Placed(ctx, lateIDs)
	if err != nil {
		return queuedSale{}, err
	}
	out.latePlaced = len(placed)
	if out.audit, err = live.Audit(ctx, sku); err != nil {
		return queuedSale{}, err
	}
	out.stranded = out.audit.HeldBack()
	// Every order row beyond one per order placed — a 202 that ended placed, a late message
	// written — is an order placed twice: a re-sent message written again.
	out.twice = max(0, out.audit.Orders-int64(out.placed+out.latePlaced))
	return out, nil
}

// settle waits, up to queueCrashBound from since, until admission holds no reservation of sku,
// its counter is the database's stock and nothing of sku is queued; it returns how long after
// since that was, or the bound when it never was.
func settle(ctx context.Context, inst *instance, sku string, since time.Time) (time.Duration, error) {
	for {
		a, err := inst.Audit(ctx, sku)
		if err != nil {
			return 0, err
		}
		if a.Redis != nil && a.Redis.Stock != nil && a.Redis.Reservations == 0 && *a.Redis.Stock == a.Stock && a.Queued != nil && *a.Queued == 0 {
			return time.Since(since), nil
		}
		if time.Since(since) > queueCrashBound {
			return time.Since(since), nil
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
