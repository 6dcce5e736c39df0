package backendtest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Wiring says which backends an instance connects to; a zero field means the process's test
// backend (with a pool or client of the instance's own, as a separate instance would have).
type Wiring struct {
	// Store is a store the test opened (StoreVia, Store) for the instance to run on; default:
	// one the instance opens from its configuration, as cmd/api does, with that configuration's
	// pool, lock wait and idle-transaction bound.
	Store      *stock.Store
	RedisAddrs []string // default: the shared test Redis; several: Redlock
	// RedisMode says what RedisAddrs are (redisclient.Mode); default: single for one
	// address, redlock for several. RedisMaster is the master name of mode sentinel.
	RedisMode     redisclient.Mode
	RedisMaster   string
	EtcdEndpoints []string // default: the process's etcd
	// ZKServers is the ZooKeeper ensemble of the zookeeper strategy; default: none, as in
	// cmd/api, and the strategy is not offered (ZooKeeperServers gives the process's own).
	ZKServers []string
}

// Config is the configuration of an instance of cfg on the backends w names: cmd/api's
// (app.Config), on the test backends (AppConfig) where w names none. Its Instance is the
// test's name unless cfg names one.
func (w Wiring) Config(t testing.TB, cfg service.Config) app.Config {
	t.Helper()
	c := AppConfig(t)
	if cfg.Instance == "" {
		cfg.Instance = t.Name()
	}
	c.Service = cfg
	if len(w.RedisAddrs) > 0 {
		c.RedisAddrs = w.RedisAddrs
	}
	c.RedisMode, c.RedisMaster = w.RedisMode, w.RedisMaster
	if len(w.EtcdEndpoints) > 0 {
		c.EtcdEndpoints = w.EtcdEndpoints
	}
	c.ZKServers = w.ZKServers
	return c
}

// Instance is one service instance built as cmd/api builds it, with its own metrics registry.
type Instance struct {
	*service.Service
	Store   *stock.Store
	Metrics *prometheus.Registry
	Handler http.Handler // the instance's HTTP API
	Log     *Log         // its warnings and errors
}

// NewInstance builds one service instance of cfg (start from service.Defaults() and change
// what the test is about) on the backends w names, with Open. It is closed in t.Cleanup.
func NewInstance(t testing.TB, cfg service.Config, w Wiring) Instance {
	t.Helper()
	return Open(t, w.Config(t, cfg), w.Store)
}

// Open builds one instance from c with app.Open — what cmd/api runs on the same configuration
// — on store when it is not nil, else on the store c names. It is closed in t.Cleanup.
func Open(t testing.TB, c app.Config, store *stock.Store) Instance {
	t.Helper()
	var opts []app.Option
	if store != nil {
		opts = append(opts, app.WithStore(store))
	}
	log := &Log{}
	a, err := app.Open(context.Background(), c, slog.New(log.handler()), io.Discard, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return Instance{Service: a.Service(), Store: a.Store(), Metrics: a.Metrics(), Handler: a.Handler(), Log: log}
}

// HoldSection returns hooks that hold open the first critical section placing an order of
// user — as a holder paused inside it would be (GC, a frozen VM) — until release is called or
// the section's context ends (its lock was lost); inside is closed once that section is
// inside, its lock held and the product read. The test calls release on the event the hold is
// for (another holder got the lock, a repeat was answered), and defers it too, so that a test
// that fails early leaves no section held for ever.
func HoldSection(user string) (hooks lockstrategy.Hooks, inside <-chan struct{}, release func()) {
	var entered, let sync.Once
	in, released := make(chan struct{}), make(chan struct{})
	hooks.InSection = func(ctx context.Context, orders []stock.OrderRequest) {
		if !slices.ContainsFunc(orders, func(r stock.OrderRequest) bool { return r.UserID == user }) {
			return
		}
		entered.Do(func() {
			close(in)
			select {
			case <-released:
			case <-ctx.Done():
			}
		})
	}
	return hooks, in, func() { let.Do(func() { close(released) }) }
}

// CutFromRedisInSection builds an instance of cfg whose Redis is reached through a fault proxy,
// and which cuts that proxy from inside the first critical section placing an order of user,
// then waits there until the lock is lost (the watchdog cannot extend it; give cfg a short
// LockTTL) and the section is abandoned: the order fails, and its give-back cannot reach Redis —
// a reservation whose order was never written, held back until the sweeper returns it. Start
// the proxy again (its Start) to reconnect the instance.
func CutFromRedisInSection(t testing.TB, cfg service.Config, user string) (Instance, *FaultProxy) {
	t.Helper()
	rp := StartFaultProxy(t, RedisAddr(t))
	var once sync.Once
	cfg.Hooks.InSection = func(ctx context.Context, orders []stock.OrderRequest) {
		if orders[0].UserID == user {
			once.Do(func() {
				rp.Stop()
				<-ctx.Done() // the lock is lost: the section is abandoned
			})
		}
	}
	return NewInstance(t, cfg, Wiring{RedisAddrs: []string{rp.Listen}}), rp
}

// Order, WaitOrder, Checkout and WaitCheckout are the instance's Read and Wait by an order's or
// a checkout's id, and PayOrder, CancelOrder, PayCheckout and CancelCheckout its Pay and
// Cancel: for tests that follow one by its id.
func (i Instance) Order(ctx context.Context, id string) (stock.Order, error) {
	return line(i.Read(ctx, stock.OrderRef(id)))
}

func (i Instance) WaitOrder(ctx context.Context, id string, wait time.Duration) (stock.Order, error) {
	return line(i.Wait(ctx, stock.OrderRef(id), wait))
}

func (i Instance) Checkout(ctx context.Context, id string) (stock.Checkout, error) {
	return i.Read(ctx, stock.CheckoutRef(id))
}

func (i Instance) WaitCheckout(ctx context.Context, id string, wait time.Duration) (stock.Checkout, error) {
	return i.Wait(ctx, stock.CheckoutRef(id), wait)
}

func (i Instance) PayOrder(ctx context.Context, id, user string) (stock.Order, error) {
	return line(i.Pay(ctx, stock.OrderRef(id), user))
}

func (i Instance) CancelOrder(ctx context.Context, id, user string) (stock.Order, error) {
	return line(i.Cancel(ctx, stock.OrderRef(id), user))
}

func (i Instance) PayCheckout(ctx context.Context, id, user string) (stock.Checkout, error) {
	return i.Pay(ctx, stock.CheckoutRef(id), user)
}

func (i Instance) CancelCheckout(ctx context.Context, id, user string) (stock.Checkout, error) {
	return i.Cancel(ctx, stock.CheckoutRef(id), user)
}

// line is the order an answer of one line holds.
func line(co stock.Checkout, err error) (stock.Order, error) {
	if err != nil {
		return stock.Order{}, err
	}
	return co.Lines[0], nil
}
