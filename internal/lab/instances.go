package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// instance is one service instance, built by app.Open as cmd/api builds it.
type instance struct {
	*service.Service
	app *app.App
}

// config is the configuration of an instance placing orders as cfg says: cmd/api's, on the
// lab's backends. An experiment changes there what it is about (a Redis of its own, a
// ZooKeeper ensemble), as a user would change a setting of cmd/api.
func (e *Env) config(cfg service.Config) app.Config {
	c := e.base
	c.Service = cfg
	return c
}

// named gives c's instance a name of the run, unless c names it: each instance its own, as
// separate processes have.
func (e *Env) named(c app.Config) app.Config {
	if c.Service.Instance == "" {
		c.Service.Instance = e.key("instance", fmt.Sprint(e.instances.Add(1)))
	}
	return c
}

// newInstance builds one service instance of c with app.Open, named in the run unless c names
// it, on the instances' shared etcd when c names none, and with an embedded NATS server of its
// own when c names no NATS.
func (e *Env) newInstance(ctx context.Context, c app.Config) (*instance, error) {
	c = e.named(c)
	if len(c.EtcdEndpoints) == 0 {
		endpoints, err := e.etcdEndpoints()
		if err != nil {
			return nil, err
		}
		c.EtcdEndpoints = endpoints
	}
	if len(c.Queue.URLs) == 0 && c.Queue.DataDir == "" {
		dir, err := e.queueDir(c.Service.Instance)
		if err != nil {
			return nil, err
		}
		c.Queue.DataDir = dir
	}
	a, err := app.Open(ctx, c, e.Log, io.Discard)
	if err != nil {
		return nil, err
	}
	return &instance{Service: a.Service(), app: a}, nil
}

// counterOf is the sum of a counter family's series in reg; 0 when it has none.
func counterOf(reg *prometheus.Registry, name string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// via is the form that places orders through the instance under strategy.
func (i *instance) via(strategy string) placer {
	return func(ctx context.Context, req stock.OrderRequest) error {
		req.Strategy = strategy
		_, _, err := i.PlaceOrder(ctx, req)
		return err
	}
}

func (i *instance) close() error { return i.app.Close() }

// labConfig is the service's default configuration with the unsafe strategies allowed and
// strategy as the default.
func labConfig(strategy string) service.Config {
	cfg := service.Defaults()
	cfg.Strategy = strategy
	cfg.AllowUnsafe = true
	return cfg
}

// overlaps counts the critical sections that run at once, across instances: the lock's one job
// is to keep this at one.
type overlaps struct {
	mu      sync.Mutex
	now     int
	most    int
	entered atomic.Int64
}

// hold is a section hook: it counts the section in, holds it for d — the database latency of
// pitfall one of «Locks in practice», or a paused holder — and counts it out.
func (o *overlaps) hold(d time.Duration) func(ctx context.Context, _ []stock.OrderRequest) {
	return func(ctx context.Context, _ []stock.OrderRequest) {
		o.entered.Add(1)
		o.mu.Lock()
		o.now++
		o.most = max(o.most, o.now)
		o.mu.Unlock()
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		o.mu.Lock()
		o.now--
		o.mu.Unlock()
	}
}

func (o *overlaps) max() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.most
}

// placer places one order: a form of an experiment, on one instance.
type placer func(ctx context.Context, req stock.OrderRequest) error

// sale is what a sale did: the answers, and the database's audit after it.
type sale struct {
	ok, soldOut, other int
	audit              stock.Audit
}

// sell has buyers buy one unit each of sku, already on sale, spread over the instances' forms,
// all at once; it then audits the product in the database. An internal error (a 500) fails the
// experiment: no form, failing or fixed, may answer one. Each buyer asks once, not as a
// buyer.Buyer retrying busy: the experiment reports what one burst hears, busy included.
func sell(ctx context.Context, env *Env, places []placer, sku string, buyers int) (sale, error) {
	var (
		mu       sync.Mutex
		out      sale
		internal error
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for b := range buyers {
		wg.Go(func() {
			<-start
			err := places[b%len(places)](ctx, stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("buyer-%d", b), Quantity: 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out.ok++
			case errors.Is(err, stock.ErrSoldOut):
				out.soldOut++
			case stock.Code(err) == "internal":
				internal = err
			default:
				out.other++
			}
		})
	}
	close(start)
	wg.Wait()
	if internal != nil {
		return out, fmt.Errorf("a buyer of %s was answered an internal error: %w", sku, internal)
	}
	a, err := env.Store.Audit(ctx, sku)
	out.audit = a
	return out, err
}

// column is what the audit found in the stock column, held against the invariant: stock >= 0,
// and stock + active ordered quantity == initial stock.
func column(a stock.Audit) string {
	s := fmt.Sprintf("the stock column: %d left + %d ordered = %d, of %d initial", a.Stock, a.OrderedQuantity, a.Stock+a.OrderedQuantity, a.InitialStock)
	switch d := a.Stock + a.OrderedQuantity - a.InitialStock; {
	case a.Stock < 0:
		s += ": below zero"
	case d > 0:
		s += fmt.Sprintf(": %d units sold without leaving the stock (a decrement written over)", d)
	case d < 0:
		s += fmt.Sprintf(": %d units gone from the stock with no order", -d)
	case a.Orders != a.DistinctBuyers:
		s += ": a buyer with two orders"
	default:
		s += ": the invariant holds"
	}
	if o := a.Oversold(); o > 0 {
		s += fmt.Sprintf("; oversold %d", o)
	}
	return s
}

// unrecorded is how many units the audit found sold without leaving the stock column: a
// decrement written over by another writer's.
func unrecorded(a stock.Audit) int64 { return max(0, a.Stock+a.OrderedQuantity-a.InitialStock) }

// holdOpen is a section hook that keeps the section placing buyer "slow" open — its lock held,
// the product read — until release: a holder paused inside its critical section.
type holdOpen struct {
	reached, resume chan struct{}
	once            sync.Once
}

func newHoldOpen() *holdOpen {
	return &holdOpen{reached: make(chan struct{}), resume: make(chan struct{})}
}

func (h *holdOpen) hook(_ context.Context, orders []stock.OrderRequest) {
	if orders[0].UserID == "slow" {
		h.once.Do(func() { close(h.reached); <-h.resume })
	}
}

// enter has buyer "slow" buy a unit of sku through place and returns once its section is held
// open; the answer comes on the channel after release.
func (h *holdOpen) enter(ctx context.Context, place placer, sku string) (<-chan error, error) {
	slow := make(chan error, 1)
	go func() { slow <- place(ctx, stock.OrderRequest{SKU: sku, UserID: "slow", Quantity: 1}) }()
	select {
	case <-h.reached:
		return slow, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *holdOpen) release() { close(h.resume) }

// buy has user buy one unit of sku through place.
func buy(ctx context.Context, place placer, sku, user string) error {
	return place(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1})
}

// services are an etcd and, where it is installed, a ZooKeeper, started in dir in the
// background — ZooKeeper's JVM takes seconds — and each waited for once: by the experiment when
// it needs it, or by stop, so that an experiment that fails early still stops what it started.
type services struct {
	zkMissing error // why ZooKeeper is not run here; nil: it is being started
	etcd      func() startedEtcd
	zk        func() startedZK
}

// startedEtcd and startedZK are servers started in the background, or why they did not start.
type startedEtcd struct {
	member *etcdserver.Member
	err    error
}

type startedZK struct {
	servers []*zkserver.Server
	err     error
}

func startServices(dir string) *services {
	etcdUp, zkUp := make(chan startedEtcd, 1), make(chan startedZK, 1)
	go func() {
		m, err := etcdserver.Start(filepath.Join(dir, "etcd"))
		etcdUp <- startedEtcd{m, err}
	}()
	s := &services{zkMissing: zkserver.Available(),
		etcd: sync.OnceValue(func() startedEtcd { return <-etcdUp }),
		zk:   sync.OnceValue(func() startedZK { return <-zkUp })}
	if s.zkMissing == nil {
		go func() {
			servers, err := zkserver.New(filepath.Join(dir, "zk"), 1)
			if err == nil {
				err = zkserver.StartAll(servers)
			}
			zkUp <- startedZK{servers, err}
		}()
	}
	return s
}

// zooKeeper waits for the ZooKeeper started in the background and returns its servers, or the
// part of the experiment that cannot run without it and why: ZooKeeper is not installed here,
// or it did not start.
func (s *services) zooKeeper() ([]*zkserver.Server, *Part) {
	if s.zkMissing != nil {
		return nil, &Part{Name: "ZooKeeper", Why: s.zkMissing.Error()}
	}
	if z := s.zk(); z.err != nil {
		return nil, &Part{Name: "ZooKeeper", Why: "it did not start: " + z.err.Error()}
	}
	return s.zk().servers, nil
}

func (s *services) stop() {
	if e := s.etcd(); e.err == nil {
		e.member.Close()
	}
	if s.zkMissing == nil {
		zkserver.Kill(s.zk().servers...)
	}
}
