package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/lockloss"
	"github.com/flashsale/seckill/loadtest/proc"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/scrape"
	"github.com/flashsale/seckill/loadtest/verify"
)

// putProduct starts the sale round of sku.
func putProduct(ctx context.Context, client *http.Client, base, token, sku string, stock int, paymentTimeout time.Duration) error {
	body := fmt.Sprintf(`{"name":"load test","stock":%d,"max_per_order":1,"payment_timeout_s":%d}`, stock, int(paymentTimeout/time.Second))
	return adminPut(ctx, client, base, token, sku, body)
}

// roundRunner runs rounds of sales: every strategy of the run, each on a fresh product.
type roundRunner struct {
	opts     options
	pass     *pass
	targets  []string
	client   *http.Client
	verifier verify.Verifier
	peaks    proc.Peaks      // of the service processes, when the tool started them
	bare     *bareServers    // nil: sold-out phases are not held against a bare handler
	fault    *lockloss.Thief // -fault lock-loss: takes the locks during each selling phase; nil: no fault
	cpu      *cpu.Meter      // the CPU time of the processes of the sale, per group
	db       dbBudget        // the database's connections, as planned before the run (-mysql)
	progress io.Writer
	log      io.Writer
}

// round sells, measures and verifies once per strategy, then (with -soldout) keeps ordering the
// sold-out product and verifies again; suffix keeps the SKUs of later rounds apart.
func (rr roundRunner) round(ctx context.Context, suffix string) ([]report.Row, map[string]attack.Sale, error) {
	o := rr.opts
	strategies := []string{o.strategy}
	switch {
	case rr.pass.only != "":
		strategies = []string{rr.pass.only}
	case o.compare:
		strategies = o.strategies()
	}
	var reports []report.Row
	sales := map[string]attack.Sale{}
	for _, strategy := range strategies {
		name := strategy
		if name == "" {
			name = "default"
		}
		row := name
		if rr.pass.label != "" {
			row = fmt.Sprintf("%s (%s)", name, rr.pass.label)
		}
		sku := o.sku + "-" + name + rr.pass.suffix + suffix
		rr.peaks.Begin()
		before, beforeErr := rr.samples(ctx)
		if err := putProduct(ctx, rr.client, rr.targets[0], o.token, sku, o.stock, o.after.timeout); err != nil {
			return nil, nil, err
		}
		l := attack.Load{Targets: rr.targets, SKU: sku, Strategy: strategy, Users: o.users, Requests: o.requests, Rate: o.rate,
			Concurrency: o.concurrency, Duration: o.duration, Timeout: o.timeout, RetryRounds: o.retryRounds, Progress: rr.progress}
		var fault *lockloss.Run
		if rr.fault != nil {
			var locks contract.Locks
			if err := rr.verifier.Get(ctx, locksPath(sku), &locks); err != nil {
				return nil, nil, fmt.Errorf("%s: -fault %s: %w", row, o.fault, err)
			}
			var err error
			if fault, err = rr.fault.Start(ctx, strategy, locks); err != nil {
				return nil, nil, fmt.Errorf("%s: -fault %s: %w", row, o.fault, err)
			}
		}
		watchers, err := watch(ctx, rr.targets, sku, rr.pass.watchers)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: watchers: %w", row, err)
		}
		rec := rr.cpu.Start()
		s, err := l.Run(ctx, row)
		rec.Stop()
		if watchers != nil {
			// The pages' promise: sold out shown within a second of the last sale.
			fmt.Fprintf(rr.log, "%s: %d of %d watchers saw sold_out\n", row, watchers.stop(2*time.Second), rr.pass.watchers)
		}
		taken, faultErr := fault.Stop()
		var (
			sold    []scrape.Sample // after the selling phase: what the fault did to a guarded strategy
			soldErr error
		)
		if fault != nil {
			sold, soldErr = rr.samples(ctx)
		}
		if err != nil {
			return nil, nil, err
		}
		if faultErr != nil {
			return nil, nil, fmt.Errorf("%s: -fault %s: %w", row, o.fault, faultErr)
		}
		faulted := ""
		if fault != nil {
			faulted = o.fault
		}
		r := report.NewRow(row, strategy, sku, s, faulted)
		r.Name, r.Pass, r.Clients = name, rr.pass.label, o.concurrency
		if rr.pass.family != "" {
			r.Family = rr.pass.family
		}
		r.CPU = &cpu.Cost{Selling: sellingCPU(rr.cpu, rec, s.Results)}
		r.Ceiling = report.NewCeiling(r.OrdersPerSecond, r.CPU.Selling, runtime.NumCPU())
		if faulted != "" {
			r.LocksTaken = &taken
		}
		if r.Outcomes[attack.Invalid] == r.Requests {
			r.Skipped = "refused by the server (the unsafe strategies need SECKILL_ALLOW_UNSAFE=true)"
		} else {
			if o.after.on() && !r.ExpectOversell {
				if s.Acked, r.Lifecycle, l, err = rr.afterSale(ctx, l, s.Acked); err != nil {
					return nil, nil, fmt.Errorf("%s after the sale: %w", row, err)
				}
			}
			rr.verifier.Drained(ctx, []string{sku}, attack.EndWithin)
			if r.Verdict, err = rr.verifier.Verify(ctx, sku, s.Acked); err != nil {
				return nil, nil, fmt.Errorf("verify %s: %w", row, err)
			}
			if o.soldOut > 0 {
				if r.Steady, err = rr.soldOut(ctx, l, r, s.Acked); err != nil {
					return nil, nil, err
				}
				r.CPU.SoldOut = r.Steady.CPU
			}
		}
		if after, err := rr.samples(ctx); err == nil && beforeErr == nil {
			// A lock that expired under a live holder (a stall longer than the TTL, its watchdog
			// late): what a short TTL costs. Informational, like memory, and so are the lock
			// times that report.html charts.
			n := int(locksLost(after) - locksLost(before))
			r.LocksLost, r.Locks = &n, scrape.NewLockTimes(strategy, before, after)
		}
		if len(rr.peaks.PIDs) > 0 {
			// Memory is informational: a process that cannot be read leaves the cell blank and
			// says why in the log, but never costs the run its verdicts.
			if r.PeakRSSMB, err = rr.peaks.Highest(); err != nil {
				fmt.Fprintf(rr.log, "loadtest: %s: %v\n", row, err)
			}
			r.PeakRSSSinceStart = rr.peaks.SinceStart
		}
		if fault != nil && !r.ExpectOversell {
			r.Bite = lockloss.NewBite(strategy, taken, before, sold, errors.Join(beforeErr, soldErr))
		}
		r.Judge()
		reports = append(reports, r)
		sales[row] = s
		fmt.Fprintf(rr.log, "loadtest: %s: %v; %s\n", row, r.Outcomes, r.VerdictText())
		if o.checkoutLines > 0 && rr.fault == nil && r.Skipped == "" {
			cr, cs, err := rr.checkouts(ctx, strategy, name, suffix)
			if err != nil {
				return nil, nil, err
			}
			reports = append(reports, cr)
			sales[cr.Strategy] = cs
			fmt.Fprintf(rr.log, "loadtest: %s: %v; %s\n", cr.Strategy, cr.Outcomes, cr.VerdictText())
		}
	}
	return reports, sales, nil
}

// checkouts sells the row's stock again, as checkouts of o.checkoutLines products of that stock
// each, one unit of each per checkout, with as many buyers: measured and verified as the row's
// own sale, each product on its own and every checkout whole.
func (rr roundRunner) checkouts(ctx context.Context, strategy, name, suffix string) (report.Row, attack.Sale, error) {
	o := rr.opts
	row := fmt.Sprintf("%s, %d-line checkout", name, o.checkoutLines)
	if rr.pass.label != "" {
		row = fmt.Sprintf("%s (%s)", row, rr.pass.label)
	}
	base := o.sku + "-" + name + rr.pass.suffix + suffix + "-co"
	lines := make([]string, o.checkoutLines)
	for i := range lines {
		lines[i] = fmt.Sprintf("%s%d", base, i+1)
		if err := putProduct(ctx, rr.client, rr.targets[0], o.token, lines[i], o.stock, o.after.timeout); err != nil {
			return report.Row{}, attack.Sale{}, err
		}
	}
	l := attack.Load{Targets: rr.targets, SKU: base, Lines: lines, Strategy: strategy, Users: o.users, Requests: o.requests, Rate: o.rate,
		Concurrency: o.concurrency, Duration: o.duration, Timeout: o.timeout, RetryRounds: o.retryRounds, Progress: rr.progress}
	rec := rr.cpu.Start()
	s, err := l.Run(ctx, row)
	rec.Stop()
	if err != nil {
		return report.Row{}, attack.Sale{}, err
	}
	r := report.NewRow(row, strategy, base, s, "")
	r.Name, r.Pass, r.Clients, r.CheckoutLines = name, rr.pass.label, o.concurrency, o.checkoutLines
	if rr.pass.family != "" {
		r.Family = rr.pass.family
	}
	r.CPU = &cpu.Cost{Selling: sellingCPU(rr.cpu, rec, s.Results)}
	r.Ceiling = report.NewCeiling(r.OrdersPerSecond, r.CPU.Selling, runtime.NumCPU())
	if r.Outcomes[attack.Invalid] == r.Requests {
		r.Skipped = "refused by the server: it does not place checkouts with this strategy"
	} else {
		rr.verifier.Drained(ctx, lines, attack.EndWithin)
		if r.Verdict, err = rr.verifier.VerifyCheckouts(ctx, lines, s.Acked); err != nil {
			return report.Row{}, attack.Sale{}, fmt.Errorf("verify %s: %w", row, err)
		}
	}
	r.Judge()
	return r, s, nil
}

// afterSale has the buyers pay, cancel or leave their orders (-cancel, -unpaid), waits until the
// unpaid ones have expired, and has fresh buyers buy the units that came back, paying for
// theirs. It returns every order with the state it must end in, and the load of the resale —
// what comes next starts past its buyers.
func (rr roundRunner) afterSale(ctx context.Context, l attack.Load, acked []verify.Order) ([]verify.Order, *report.Lifecycle, attack.Load, error) {
	a := rr.opts.after
	acted, rep := a.act(ctx, rr.client, rr.targets, acked, false, 32)
	returnedIn, err := a.awaitNoPending(ctx, rr.verifier, l.SKU)
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	rep.ReturnedIn = returnedIn
	resale := l
	resale.First, resale.Users = l.First+l.Requests, 2*(rep.Cancelled+rep.Unpaid)+64
	resale.Requests, resale.Progress = resale.Users, nil
	s, err := resale.Run(ctx, "resale")
	if err != nil {
		return nil, nil, l, err
	}
	resold, payments := a.act(ctx, rr.client, rr.targets, s.Acked, true, 32)
	rep.Resold = len(resold)
	rep.Problems = append(rep.Problems, payments.Problems...)
	fmt.Fprintf(rr.log, "loadtest: %s: after the sale %d cancelled, %d unpaid (back on sale %s after the payments), %d paid; %d resold\n",
		l.Strategy, rep.Cancelled, rep.Unpaid, returnedIn.Round(time.Millisecond), rep.Paid, rep.Resold)
	return append(acted, resold...), &rep, resale, nil
}

// locksLost sums seckill_lock_lost_total over the instances' samples.
func locksLost(samples []scrape.Sample) float64 {
	var total float64
	for _, s := range samples {
		total += s.LocksLost
	}
	return total
}

// bareSlices is how many times a sold-out phase alternates with the bare handler's.
const bareSlices = 3

// soldOut runs the steady sold-out phase on a sale that sold out and was verified, and checks
// the invariant again after it, counting any 201 of the phase as an order the store must hold.
func (rr roundRunner) soldOut(ctx context.Context, l attack.Load, r report.Row, acked []verify.Order) (*attack.Steady, error) {
	if left := r.Verdict.Audit.Stock; left != 0 {
		return &attack.Steady{Duration: rr.opts.soldOut, Skipped: fmt.Sprintf("the sale ended with stock %d left", left)}, nil
	}
	// Against a bare handler, the phase alternates with it in thirds, so that drift on a shared
	// machine (a database still flushing the sale, a collector running) weighs on both alike.
	var own, bare attack.Slices
	var use cpu.Use // over the service's slices only
	serviceSlice := func(d time.Duration) {
		rec := rr.cpu.Start()
		l.SoldOutSlice(ctx, r.Strategy, d, &own)
		rec.Stop()
		use = use.Add(rec.Whole())
	}
	if rr.bare == nil {
		serviceSlice(rr.opts.soldOut)
	} else {
		for range bareSlices {
			rr.bare.slice(ctx, rr.opts.concurrency, rr.opts.soldOut/bareSlices, &bare, rr.progress)
			serviceSlice(rr.opts.soldOut / bareSlices)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := own.Steady()
	s.CPU = rr.cpu.Phase(use, own.Answered())
	if rr.bare != nil {
		b := bare.Steady()
		rr.bare.measured(rr.opts.concurrency, b)
		if b.Throughput > 0 {
			s.Bare, s.VsBare = &b, s.Throughput/b.Throughput
		}
	}
	v, err := rr.verifier.Verify(ctx, l.SKU, append(slices.Clip(acked), s.Acked...))
	if err != nil {
		return nil, fmt.Errorf("verify %s after the sold-out phase: %w", r.Strategy, err)
	}
	s.Verdict = &v
	fmt.Fprintf(rr.log, "loadtest: %s sold out: %d requests at %.0f req/s, p99 %s ms; %v\n", r.Strategy, s.Requests, s.Throughput, report.Milliseconds(s.P99), s.Outcomes)
	return &s, nil
}

// samples scrapes every target's /metrics.
func (rr roundRunner) samples(ctx context.Context) ([]scrape.Sample, error) {
	var out []scrape.Sample
	for _, target := range rr.targets {
		s, err := scrape.Read(ctx, rr.client, target)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// sellingCPU is the cost of a sale's selling phase, recorded by rec: from its first request to its
// last sale's answer, the window its orders/s is measured over; nil without a sale.
func sellingCPU(m *cpu.Meter, rec *cpu.Recording, results []*vegeta.Result) *cpu.Phase {
	from, to, orders := attack.SellingWindow(results)
	if orders == 0 {
		return nil
	}
	return m.Phase(rec.Between(from, to), orders)
}

// locksPath is the path of the service's lock keys of sku.
func locksPath(sku string) string { return "/api/v1/products/" + sku + "/locks" }
