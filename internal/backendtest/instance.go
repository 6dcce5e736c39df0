package backendtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Wiring says which backends an instance connects to; a zero field means the process's test
// backend (with a pool or client of the instance's own, as a separate instance would have).
type Wiring struct {
	Store      *stock.Store // default: Store(t)
	RedisAddrs []string     // default: the shared test Redis; several: Redlock
	// RedisMode says what RedisAddrs are (redisclient.Mode); default: single for one
	// address, redlock for several. RedisMaster is the master name of mode sentinel.
	RedisMode     redisclient.Mode
	RedisMaster   string
	EtcdEndpoints []string // default: the process's etcd
	// ZKServers is the ZooKeeper ensemble of the zookeeper strategy; default: none, as in
	// cmd/api, and the strategy is not offered (ZooKeeperServers gives the process's own).
	ZKServers []string
	// Queue gives the instance the test process's order queue (QueueConfig), and so the queued
	// strategy; an instance whose default strategy is queued has it anyway.
	Queue bool
}

// Instance is one service instance built as cmd/api builds it, with its own metrics registry.
type Instance struct {
	*service.Service
	Store   *stock.Store
	Metrics *prometheus.Registry
}

// NewInstance builds one service instance with service.New — the composition root of cmd/api —
// from cfg (start from service.Defaults() and change what the test is about) on the backends w
// names. It is closed in t.Cleanup.
func NewInstance(t testing.TB, cfg service.Config, w Wiring) Instance {
	t.Helper()
	if w.Store == nil {
		w.Store = Store(t)
	}
	if len(w.RedisAddrs) == 0 {
		w.RedisAddrs = []string{RedisAddr(t)}
	}
	if len(w.EtcdEndpoints) == 0 {
		w.EtcdEndpoints = EtcdEndpoints(t)
	}
	if cfg.Instance == "" {
		cfg.Instance = t.Name()
	}
	if w.RedisMode == "" {
		w.RedisMode, _ = redisclient.ParseMode("", len(w.RedisAddrs))
	}
	clients, err := redisclient.New(w.RedisMode, w.RedisAddrs, w.RedisMaster)
	require.NoError(t, err)
	for _, c := range clients {
		t.Cleanup(func() { _ = c.Close() })
	}
	b := service.Backends{Store: w.Store, Redis: clients, Etcd: EtcdClient(t, w.EtcdEndpoints)}
	if len(w.ZKServers) > 0 {
		b.ZooKeeper = ZooKeeper(t, w.ZKServers, cfg.LockTTL)
	}
	reg := prometheus.NewRegistry()
	if w.Queue || cfg.Strategy == "queued" {
		b.Queue = OpenQueue(t, QueueConfig(t), reg)
	}
	svc, err := service.New(cfg, b, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Close() })
	return Instance{Service: svc, Store: w.Store, Metrics: reg}
}

// HoldSection returns hooks that hold open, for d, the first critical section placing an order
// of user — as a holder paused inside it would (GC, a frozen VM) — and a channel closed once
// that section is inside, its lock held and the product read. The hold ends early if the
// section's context ends (its lock was lost).
func HoldSection(user string, d time.Duration) (lockstrategy.Hooks, <-chan struct{}) {
	var once sync.Once
	inside := make(chan struct{})
	return lockstrategy.Hooks{InSection: func(ctx context.Context, orders []stock.OrderRequest) {
		if !slices.ContainsFunc(orders, func(r stock.OrderRequest) bool { return r.UserID == user }) {
			return
		}
		once.Do(func() {
			close(inside)
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		})
	}}, inside
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
