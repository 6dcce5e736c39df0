package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/stock"
	"github.com/flashsale/seckill/quantile"
)

// pool is the database lock of «Choosing a lock» and «Locks in practice» under a flash sale's burst: every order takes the
// product row with SELECT ... FOR UPDATE in a transaction of its own, on the service's connection
// pool, and holds it while the handler does its few milliseconds of work. The orders queue for
// the row one at a time, each holding a connection while it waits, the rest wait for a
// connection, and the requests time out — not only the hot product's: every request of the
// service needs the same pool. Each form is judged on the claim's two measured halves: the
// service's pool ran dry (database/sql's WaitCount of the main pool), and another product's read
// stalled behind it. The documents' fix is NOWAIT (a busy answer instead of a parked
// connection), the row-lock strategy's default; the project's queue is the strategy's other form
// (stock.WaitForRow, SECKILL_ROW_LOCK=wait), which waits on a small pool of its own and places
// the orders queued in memory in one transaction (group commit). A fix holds when the
// pool never ran dry, the other product's reads never stalled, and nothing answered 5xx; the
// experiment's verdict is the project's fix, and NOWAIT is judged the same way beside it.
func pool() Experiment {
	return Experiment{
		Name: "pool",
		Seed: "«Locks in practice», 坑三 (pitfall three): SELECT ... FOR UPDATE as a lock, 200 concurrent requests, the pool exhausted",
		Claim: "Per-order SELECT ... FOR UPDATE under a burst runs the service's pool dry behind one row, and another product's reads stall with it; " +
			"the batched row-lock queue on a pool of its own keeps the main pool from running dry. NOWAIT, the fix «Locks in practice» gives, is judged the same way.",
		Fix: "SECKILL_STRATEGY=pessimistic SECKILL_ROW_LOCK=wait SECKILL_GROUP_COMMIT=64: one waiting section per product, on a pool of its own; «Locks in practice»'s: SELECT ... FOR UPDATE NOWAIT",
		Run: runPool,
	}
}

// poolForm is one way to place the burst's orders.
type poolForm struct {
	name  string
	place func(ctx context.Context, req stock.OrderRequest) (stock.Order, error)
	// warm: one buyer orders before the burst, on a unit of its own. The service answers an
	// order outside its sale window from memory, and reads the window into it at an instance's
	// first order for the product — once per order that finds it missing, so a burst at a cold
	// instance would open with a read per buyer on the main pool. Before a real flash sale the
	// window is in memory already: its buyers were on the page first.
	warm bool
}

// poolRun is what one form's burst did.
type poolRun struct {
	placed, soldOut, busy int
	timeouts, fiveXX      int           // timeouts are 5xx too: a backend that did not answer in time
	p50, p99              time.Duration // of every request
	waits                 int64         // requests that found the service's pool spent
	waited                time.Duration // their wait for a connection, in total
	poolSize              int
	idle                  time.Duration // the slowest read of another product before the burst
	bystander             time.Duration // the slowest read of another product during the burst
	bystanderReads        int
	bystanderFailed       int
	stallAt               time.Duration // a read of another product this slow stalled
	audit                 stock.Audit
}

// dry is the first half of the claim: requests found every connection of the service's pool in
// use and waited for one.
func (r poolRun) dry() bool { return r.waits > 0 }

// stalled is the second: another product's read, which needs no row lock, waited with them.
func (r poolRun) stalled() bool { return r.bystander >= r.stallAt || r.bystanderFailed > 0 }

// held is a fix's verdict: the pool never ran dry, the other product was never stalled, and
// nothing answered 5xx.
func (r poolRun) held() bool { return !r.dry() && !r.stalled() && r.fiveXX == 0 }

func runPool(ctx context.Context, env *Env) (Result, error) {
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	if env.Store.Dialect() != stock.MySQL {
		return Result{}, &NotRun{Why: "the pool pitfall is MySQL/MariaDB row locks; the store is " + string(env.Store.Dialect())}
	}
	requests := pick(env.Size, 60, 200)
	// A handler's own work with the row locked — a risk check, a call to another service. It makes
	// the queue of one-order transactions outlast the request timeout at both sizes.
	hold := 20 * time.Millisecond
	timeout := time.Second
	// The project's queue is a service instance configured as cmd/api would be for it
	// (SECKILL_STRATEGY=pessimistic SECKILL_ROW_LOCK=wait SECKILL_GROUP_COMMIT=64
	// SECKILL_LOCK_WAIT=1s). Every form runs on its store: its pool is the service's pool.
	cfg := labConfig("pessimistic")
	cfg.GroupCommit, cfg.RowLock, cfg.LockWait = 64, stock.WaitForRow, timeout
	// The same work, with the row locked, once per section: the orders of a batch share it.
	cfg.Hooks.InSection = func(ctx context.Context, _ []stock.OrderRequest) { sleep(ctx, hold) }
	inst, err := env.newInstance(ctx, env.config(cfg))
	if err != nil {
		return Result{}, err
	}
	defer inst.close()
	store := inst.app.Store()
	forms := []poolForm{
		{"SELECT ... FOR UPDATE, one order a transaction", func(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
			return store.PlaceOneForUpdate(ctx, req, stock.WaitForRow, hold)
		}, false},
		{"SELECT ... FOR UPDATE NOWAIT", func(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
			return store.PlaceOneForUpdate(ctx, req, stock.NoWait, hold)
		}, false},
		{"the row-lock queue, up to 64 orders a transaction", func(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
			req.Strategy = "pessimistic"
			order, _, err := inst.PlaceOrder(ctx, req)
			return order, err
		}, true},
	}
	bystander := env.key("pool", "bystander")
	if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: bystander, Name: "another product", Stock: 1, MaxPerOrder: 1}); err != nil {
		return Result{}, err
	}
	skus := []string{bystander}
	defer func() { deleteProducts(ctx, env, skus) }()

	runs := make([]poolRun, len(forms))
	chart := Chart{Title: fmt.Sprintf("Another product's slowest read during a burst of %d orders for one product (stalled from %s)", requests, ms(timeout/10)), Unit: "ms"}
	for i, f := range forms {
		sku := env.key("pool", fmt.Sprint(i))
		skus = append(skus, sku)
		// Fewer units than buyers, as in a flash sale: sold out is an answer, not a failure.
		units := int64(requests / 2)
		if f.warm {
			units++
		}
		if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: f.name, Stock: units, MaxPerOrder: 1}); err != nil {
			return Result{}, err
		}
		if f.warm {
			if _, err := f.place(ctx, stock.OrderRequest{SKU: sku, UserID: "first", Quantity: 1}); err != nil {
				return Result{}, fmt.Errorf("%s: the first buyer: %w", f.name, err)
			}
		}
		r, err := burst(ctx, env, store, f, sku, bystander, requests, timeout)
		if err != nil {
			return Result{}, err
		}
		if !r.audit.Consistent() {
			return Result{}, fmt.Errorf("%s broke the invariant: %+v", f.name, r.audit)
		}
		runs[i] = r
		failed := !r.held()
		if i == 0 {
			failed = r.dry() && r.stalled()
		}
		chart.Bars = append(chart.Bars, Bar{Label: fmt.Sprintf("%s (pool waits %d, %d 5xx)", f.name, r.waits, r.fiveXX), Value: float64(r.bystander.Microseconds()) / 1000, Failed: failed})
	}
	said := make([]string, len(forms))
	for i, r := range runs {
		said[i] = r.said(requests, timeout)
	}
	nowait := "held: the pool never ran dry, no read of another product stalled, no 5xx"
	if !runs[1].held() {
		nowait = "did not hold: " + runs[1].why()
	}
	return Result{
		Failing: Outcome{Form: forms[0].name + ", the row held " + ms(hold), Happened: said[0] + ". The claim: " + runs[0].claim(), Failed: runs[0].dry() && runs[0].stalled()},
		Fixed: Outcome{Form: forms[2].name + " (the project's); beside it " + forms[1].name + " («Locks in practice»'s)",
			Happened: "The queue: " + said[2] + ". NOWAIT, judged the same way, " + nowait + ": " + said[1],
			Failed:   !runs[2].held()},
		Chart: chart,
	}, nil
}

// claim is the failing form's judgement: which halves of the claim it showed.
func (r poolRun) claim() string {
	dry, stalled := "the pool never ran dry", "no read of another product stalled"
	if r.dry() {
		dry = "the pool ran dry"
	}
	if r.stalled() {
		stalled = "another product's read stalled"
	}
	return dry + ", " + stalled
}

// why is what broke a fix.
func (r poolRun) why() string {
	var out []string
	if r.dry() {
		out = append(out, "the pool ran dry too")
	}
	if r.stalled() {
		out = append(out, "another product's read stalled")
	}
	if r.fiveXX > 0 {
		out = append(out, fmt.Sprintf("%d answered 5xx", r.fiveXX))
	}
	return strings.Join(out, ", ")
}

// burst sends n orders for sku at once, each with its own timeout, while a bystander reads
// another product every 20 ms — the rest of the service, which shares store's pool. Each order
// is sent once, not through a buyer.Buyer: the 5xx answers are what the experiment measures.
func burst(ctx context.Context, env *Env, store *stock.Store, f poolForm, sku, bystander string, n int, timeout time.Duration) (poolRun, error) {
	// A stall is a read that took a tenth of the requests' timeout: alone, it takes about a
	// millisecond (r.idle, measured first).
	r := poolRun{stallAt: timeout / 10}
	for range 5 {
		began := time.Now()
		if _, err := store.Product(ctx, bystander); err != nil {
			return r, err
		}
		r.idle = max(r.idle, time.Since(began))
	}
	before := store.PoolStats()
	r.poolSize = before.MaxOpenConnections
	start := make(chan struct{})
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			began := time.Now()
			_, errs[i] = f.place(rctx, stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("buyer-%d", i), Quantity: 1, Strategy: "lab"})
			took[i] = time.Since(began)
		})
	}
	done := make(chan struct{})
	var reads sync.WaitGroup
	reads.Go(func() {
		for {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			began := time.Now()
			_, err := store.Product(rctx, bystander)
			r.bystander = max(r.bystander, time.Since(began))
			cancel()
			r.bystanderReads++
			if err != nil {
				r.bystanderFailed++
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	close(start)
	wg.Wait()
	close(done)
	reads.Wait()
	after := store.PoolStats()
	r.waits, r.waited = after.WaitCount-before.WaitCount, after.WaitDuration-before.WaitDuration

	for _, err := range errs {
		switch code := stock.Code(err); {
		case err == nil:
			r.placed++
		case errors.Is(err, stock.ErrSoldOut):
			r.soldOut++
		case errors.Is(err, stock.ErrBusy):
			r.busy++ // 429 with Retry-After: the client may try again
		case code == "unavailable" || code == "internal":
			r.fiveXX++
			if errors.Is(err, context.DeadlineExceeded) {
				r.timeouts++
			}
		default:
			return r, fmt.Errorf("%s: an answer the burst does not expect: %w", f.name, err)
		}
	}
	r.p50, r.p99 = quantile.Of(took, 0.5), quantile.Of(took, 0.99)
	// The requests that timed out may have left transactions the server is still unwinding: the
	// audit reads committed rows only, so it sees every order that was placed.
	a, err := env.Store.Audit(context.WithoutCancel(ctx), sku)
	r.audit = a
	return r, err
}

// said is the run in a sentence.
func (r poolRun) said(n int, timeout time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d orders: %d placed, %d sold out, %d busy, %d answered 5xx (%d timed out at %s); p50 %s, p99 %s; ",
		n, r.placed, r.soldOut, r.busy, r.fiveXX, r.timeouts, timeout, ms(r.p50), ms(r.p99))
	if r.waits > 0 {
		fmt.Fprintf(&b, "the service's pool of %d ran dry: %d requests waited %.1f s for a connection in all; ", r.poolSize, r.waits, r.waited.Seconds())
	} else {
		fmt.Fprintf(&b, "the service's pool of %d never ran dry; ", r.poolSize)
	}
	fmt.Fprintf(&b, "another product, read %d times meanwhile, took up to %s (alone, before the burst: up to %s)", r.bystanderReads, ms(r.bystander), ms(r.idle))
	if r.bystanderFailed > 0 {
		fmt.Fprintf(&b, " (%d reads failed)", r.bystanderFailed)
	}
	fmt.Fprintf(&b, "; stock %d + ordered %d = %d initial", r.audit.Stock, r.audit.OrderedQuantity, r.audit.InitialStock)
	return b.String()
}

// deleteProducts removes the experiment's products and their orders, after the run: the lab's
// database outlives it. A product that cannot be deleted is left, and said so.
func deleteProducts(ctx context.Context, env *Env, skus []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, sku := range skus {
		if err := env.Store.DeleteProduct(ctx, sku); err != nil {
			env.Log.Warn("lab: product left behind", "sku", sku, "err", err)
		}
	}
}

// ms is d in milliseconds, for the report.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

// sleep pauses for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
