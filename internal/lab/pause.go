package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/buyer"
	"github.com/flashsale/seckill/internal/stock"
)

// pause is 坑二 (pitfall two) of «Locks in practice» (docs/sources.md), on a real ZooKeeper: a holder
// stops (a GC pause) for longer than its session, the server ends the session and deletes its lock
// node, another instance is granted the lock and sells — and the first wakes up still inside its
// section and writes. The pause is made real for ZooKeeper: the holder's section is held and its
// connection cut, so its heartbeats stop as a stopped process's would. The sources give three
// fixes; each is run:
//  1. a session longer than the pause: no second holder, but the sale waits out the pause;
//  2. a lock in the process in front of the section (Java's synchronized) — present in every
//     form here (the batcher runs one section per SKU and instance), and no help: the second
//     holder is another process;
//  3. a version check: this project's fence (the lock node's zxid) refuses the late write.
//
// The guarded and unguarded forms differ in the fence alone (neither has admission in front),
// and each sale is judged on the database's audit: the stock column against the orders.
func pause() Experiment {
	return Experiment{
		Name:  "pause",
		Seed:  "«Locks in practice», 坑二 (pitfall two): an 8 s GC pause, a 5 s ZooKeeper session, the lock node gone, two writers",
		Claim: "A holder paused longer than its session loses its lock and the lock alone oversells when it wakes; a longer session avoids it at the cost of a frozen sale, and the fence refuses the late write.",
		Fix:   `UPDATE products SET ..., zk_fence = ? WHERE sku = ? AND version = ? AND zk_fence <= ?`,
		Run:   runPause,
	}
}

func runPause(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	if err := zkserver.Available(); err != nil {
		return Result{}, &NotRun{Why: err.Error()}
	}
	dir, err := os.MkdirTemp("", "seckill-lab-zk-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	servers, err := zkserver.New(dir, 1)
	if err != nil {
		return Result{}, err
	}
	defer zkserver.Kill(servers...)
	if err := zkserver.StartAll(servers); err != nil {
		return Result{}, &NotRun{Why: "ZooKeeper did not start: " + err.Error()}
	}
	addrs := zkserver.Addrs(servers...)

	session := pick(env.Size, time.Second, 2*time.Second)
	paused := pick(env.Size, 2*time.Second, 4*time.Second)
	forms := []struct {
		name, strategy string
		session        time.Duration
	}{
		{fmt.Sprintf("unguarded-zookeeper, session %s, one section per SKU and instance", session), "unguarded-zookeeper", session},
		{fmt.Sprintf("unguarded-zookeeper, session %s (longer than the pause)", 2*paused), "unguarded-zookeeper", 2 * paused},
		{fmt.Sprintf("zookeeper (fenced), session %s", session), "zookeeper", session},
	}
	chart := Chart{Title: fmt.Sprintf("Units oversold, and seconds the others could not sell, with the holder paused %s", paused), Unit: ""}
	runs := make([]pausedSale, len(forms))
	for i, f := range forms {
		r, err := sellAroundPause(ctx, env, addrs, env.key("pause", fmt.Sprint(i)), f.strategy, f.session, session, paused)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", f.name, err)
		}
		runs[i] = r
		chart.Bars = append(chart.Bars,
			Bar{Label: f.name + ": units sold that never left the stock column", Value: float64(unrecorded(r.audit)), Failed: !r.audit.Consistent()},
			Bar{Label: f.name + ": s without a sale", Value: r.stall.Seconds()})
	}
	describe := func(r pausedSale) string {
		return fmt.Sprintf("the others sold again %.2f s into the pause; the holder's late write: %s; %d orders of 2 units: %s",
			r.stall.Seconds(), r.late, r.audit.OrderedQuantity, column(r.audit))
	}
	return Result{
		Failing: Outcome{Form: forms[0].name, Happened: describe(runs[0]), Failed: !runs[0].audit.Consistent()},
		Fixed: Outcome{Form: "a longer session; the fence",
			Happened: "longer session: " + describe(runs[1]) + ". Fence: " + describe(runs[2]),
			Failed:   !runs[1].audit.Consistent() || !runs[2].audit.Consistent()},
		Chart: chart,
	}, nil
}

// pausedSale is what one sale around a paused holder did.
type pausedSale struct {
	audit stock.Audit   // after the sale
	stall time.Duration // from the pause to the others' first sale
	late  string        // what the paused holder's write did
}

// sellAroundPause puts 2 units on sale; the holder instance's section for buyer "slow" reads
// the product and is then paused for d, its ZooKeeper connection cut; another instance sells
// one unit as soon as it can; the holder wakes and writes; a last buyer buys.
func sellAroundPause(ctx context.Context, env *Env, zkAddrs []string, sku, strategy string, holderSession, othersSession, d time.Duration) (pausedSale, error) {
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		"zk-"+sku, "127.0.0.1:0", zkAddrs[0])
	if err := proxy.Start(); err != nil {
		return pausedSale{}, err
	}
	defer proxy.Stop()

	// The session timeout of an instance's ZooKeeper is its lock TTL, as cmd/api dials it.
	others := env.config(labConfig(strategy))
	others.ZKServers, others.Service.LockTTL = zkAddrs, othersSession
	other, err := env.newInstance(ctx, others)
	if err != nil {
		return pausedSale{}, err
	}
	defer other.close()
	held := newHoldOpen()
	holding := env.config(labConfig(strategy))
	holding.Service.Hooks.InSection = held.hook
	holding.ZKServers, holding.Service.LockTTL = []string{proxy.Listen}, holderSession
	holder, err := env.newInstance(ctx, holding)
	if err != nil {
		return pausedSale{}, err
	}
	defer holder.close()
	if _, err := other.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: 2, MaxPerOrder: 1}); err != nil {
		return pausedSale{}, err
	}
	slow, err := held.enter(ctx, holder.via(strategy), sku)
	if err != nil {
		return pausedSale{}, err
	}
	proxy.Stop() // the holder stops: no heartbeats from now on
	pausedAt := time.Now()
	fast := make(chan error, 1)
	var stall time.Duration
	go func() {
		b := buyer.Buyer{Places: []buyer.Place{other.PlaceOrder}, Until: pausedAt.Add(3 * d)}
		out, err := b.Buy(ctx, stock.OrderRequest{SKU: sku, UserID: "fast", Quantity: 1, Strategy: strategy})
		stall = time.Since(pausedAt)
		fast <- cmp.Or(err, out.Err)
	}()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	if err := proxy.Start(); err != nil {
		return pausedSale{}, err
	}
	held.release() // the holder wakes, inside its section, and writes
	lateErr := <-slow
	if err := <-fast; err != nil {
		return pausedSale{}, fmt.Errorf("the other instance could not sell: %w", err)
	}
	_ = buy(ctx, other.via(strategy), sku, "last")
	a, err := env.Store.Audit(ctx, sku)
	if err != nil {
		return pausedSale{}, err
	}
	late := "written"
	if lateErr != nil {
		late = "refused (" + stock.Code(lateErr) + ")"
		if errors.Is(lateErr, stock.ErrFencedOut) {
			late = "refused: fenced out"
		}
	}
	return pausedSale{audit: a, stall: stall, late: late}, nil
}
