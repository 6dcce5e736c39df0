// Package app is the composition root of one seckill instance: from a Config it opens the
// backends — the configured ones, or embedded ones where none is configured — and builds the
// service on them (build.go: admission, the strategies, the queued pipeline, service.New), the HTTP handler on the service (handler.New) and the server
// that serves it. cmd/api, the test fixtures (backendtest), the handler tests and the lab all
// build their instances with Open, from the Config that cmd/api reads from its flags and
// environment: a test or an experiment that changes a setting — the lock wait, the pool, group
// commit — changes it where cmd/api would, the store's lock wait and the strategies' alike.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/feed"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/handler"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/queued"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// Config is the whole configuration of one instance. cmd/api fills it from its flags and the
// environment (SECKILL_<NAME>); tests and the lab start from Defaults and change what they are
// about.
type Config struct {
	Addr       string        // the HTTP listen address
	MySQLDSN   string        // MySQL/MariaDB; empty: the embedded SQLite file in DataDir
	DBMaxConns int           // the store's connection pool (MySQL: mind max_connections across instances)
	DBIdleTx   time.Duration // MySQL/MariaDB: the server ends a transaction of this instance idle this long
	// RedisAddrs are the Redis addresses, read as RedisMode says (redisclient.Mode); empty: an
	// embedded Redis. RedisMode "" is the default for the number of addresses; RedisMaster is
	// the master name of mode sentinel.
	RedisAddrs    []string
	RedisMode     redisclient.Mode
	RedisMaster   string
	EtcdEndpoints []string // empty: an etcd server embedded in the process, in DataDir
	ZKServers     []string // one ensemble, its session timeout the lock TTL; empty: the zookeeper strategies are not offered
	// Queue is the order queue of the queued strategy: Queue.URLs a NATS JetStream cluster
	// (SECKILL_NATS_URLS); empty, a NATS server embedded in the process, in DataDir. The names
	// default to the contract's (orderqueue.Config).
	Queue orderqueue.Config
	// Queued are the queued strategy's writers; their batch, the bound on waiting orders, the
	// lock wait and the hooks come from Service.
	Queued          queued.Options
	AdminToken      string
	DataDir         string // where the embedded backends keep their files
	ShutdownTimeout time.Duration
	RateLimit       float64 // per-client requests/s to the API; 0: off
	RateBurst       int
	TrustedProxies  []string
	// Buyers is the front door's buyer identity and per-buyer limit; the zero value is off.
	Buyers Buyers
	// EventsMax caps the sale page's event streams open on this instance at once; past it a
	// watcher is answered 503. 0: feed.DefaultMax.
	EventsMax int
	Service   service.Config
}

// Buyers is buyer identity (docs/frontdoor.md): JWKS is the file or http(s) URL of the
// keys buyer tokens are signed with (empty: a body's user_id is trusted), Audience the aud a
// token must carry (empty: any), Rate and Burst the per-buyer token bucket shared by every
// instance (Rate 0: none). A limit needs identity: without it a buyer is whatever name a body
// writes, and a limit per written name limits nothing.
type Buyers struct {
	JWKS, Audience string
	Rate           float64
	Burst          int
}

// Defaults is the configuration of cmd/api when nothing is set: every value an instance runs
// with, in one place (the constructors take them as given).
func Defaults() Config {
	ackWait := 5 * time.Second
	if planted.On(planted.LongAckWait) {
		ackWait = 20 * time.Second
	}
	return Config{
		Addr:       ":8080",
		DBMaxConns: 32,
		DBIdleTx:   2 * time.Second,
		DataDir:    "./.seckill",
		// Sized for a sale of the service's size; AckWait bounds how long a killed writer's orders
		// wait for another writer, within the 10 s in which every 202 ends.
		Queue: orderqueue.Config{MaxMsgs: 100_000, MaxBytes: 64 << 20, Duplicates: 10 * time.Minute,
			AckWait: ackWait, MaxAckPending: 10_000, RecordTTL: 24 * time.Hour},
		// One writer per instance: every instance's writers take turns at a product's lock, and a
		// second one here would split the batches that came meanwhile into smaller sections.
		Queued: queued.Options{Writers: 1, BatchBytes: 256 << 10, Idle: time.Second, Retry: 250 * time.Millisecond,
			Publish: 2 * time.Second},
		ShutdownTimeout: 15 * time.Second,
		EventsMax:       feed.DefaultMax,
		Service:         service.Defaults(),
	}
}

// StoreOptions are the options of every store an instance opens: its pool, and the lock wait
// and idle-transaction bound the database enforces, from the same settings the strategies use.
func (c Config) StoreOptions() stock.Options {
	return stock.Options{MaxOpenConns: c.DBMaxConns, LockWait: c.Service.LockWait, IdleTx: c.DBIdleTx}
}

// App is one instance: its backends, the service on them, the handler and the HTTP server.
type App struct {
	cfg     Config
	log     *slog.Logger
	store   *stock.Store
	redis   []redis.UniversalClient
	svc     *service.Service
	events  *feed.Hub
	handler http.Handler
	metrics *prometheus.Registry
	closers []func() error // what Open opened, closed in reverse order
}

// An Option changes how Open builds an instance, for tests.
type Option func(*options)

type options struct {
	store *stock.Store
	wrap  func(prometheus.Registerer) prometheus.Registerer
}

// WithStore runs the instance on store, opened and migrated by the caller (who closes it),
// instead of the store the Config names: a test's store behind a fault proxy, a closed one, one
// shared with the test.
func WithStore(store *stock.Store) Option { return func(o *options) { o.store = store } }

// WrapRegisterer has the instance register its metrics through wrap(its registry), for a test
// that watches what is registered.
func WrapRegisterer(wrap func(prometheus.Registerer) prometheus.Registerer) Option {
	return func(o *options) { o.wrap = wrap }
}

// Open opens the backends cfg names, in order — the store (migrated), Redis, etcd, ZooKeeper,
// the order queue —
// and builds the service and the handler on them. It says on out which backend each one is.
// Close the App when done: it closes what Open opened.
func Open(ctx context.Context, cfg Config, log *slog.Logger, out io.Writer, opts ...Option) (_ *App, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	a := &App{cfg: cfg, log: log, metrics: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			_ = a.Close()
		}
	}()
	if a.store = o.store; a.store == nil {
		if a.store, err = OpenStore(ctx, cfg, out); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, a.store.Close)
		if err := a.store.Migrate(ctx, log); err != nil {
			return nil, err
		}
	}
	rdb, err := openRedis(ctx, cfg, out, log)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, rdb.Close)
	a.redis = rdb.clients
	etcd, err := openEtcd(cfg, out)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, etcd.Close)
	zkConn, err := openZooKeeper(cfg, out, log)
	if err != nil {
		return nil, err
	}
	if zkConn != nil {
		a.closers = append(a.closers, func() error { zkConn.Close(); return nil })
	}

	var reg prometheus.Registerer = a.metrics
	if o.wrap != nil {
		reg = o.wrap(reg)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	queue, err := openQueue(ctx, cfg, out, log, reg)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() error { queue.Close(); return nil })
	// The front door's shared state (the lines, the pass key) is on the Redis that holds
	// admission: one place every instance agrees on.
	passes := frontdoor.NewPasses(rdb.clients[0], frontdoor.Options{})
	a.svc, err = build(cfg.Service, cfg.Queued, opened{store: a.store, redis: rdb.clients, etcd: etcd.client, zooKeeper: zkConn,
		queue: queue, passes: passes}, log, reg)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.svc.Close)
	door := handler.Door{Room: frontdoor.NewRoom(rdb.clients[0], passes, frontdoor.Options{})}
	if door.Buyers, door.Limit, err = openBuyers(ctx, cfg.Buyers, rdb.clients[0], out, log); err != nil {
		return nil, err
	}
	// The sale page's feeds read through the service: one read a tick per watched product.
	a.events = feed.New(a.svc, feed.Options{Max: cfg.EventsMax}, log, reg)
	a.closers = append(a.closers, func() error { a.events.Close(); return nil })
	a.handler, err = handler.New(handler.Config{
		Sales:          a.svc,
		AdminToken:     cfg.AdminToken,
		Log:            log,
		Registerer:     reg,
		Gatherer:       a.metrics,
		RateLimit:      handler.RateLimit{Rate: cfg.RateLimit, Burst: cfg.RateBurst},
		TrustedProxies: cfg.TrustedProxies,
		Door:           door,
		Events:         a.events,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// openBuyers builds buyer identity and the per-buyer limit b names, and says on out which it is:
// off (a body's user_id trusted) is said once, at start, so that nobody runs it unknowingly.
func openBuyers(ctx context.Context, b Buyers, rdb redis.UniversalClient, out io.Writer, log *slog.Logger) (*frontdoor.Verifier, *frontdoor.Limiter, error) {
	if b.JWKS == "" {
		if b.Rate > 0 || b.Audience != "" {
			return nil, nil, errors.New("SECKILL_BUYER_RATE and SECKILL_BUYER_AUDIENCE need SECKILL_BUYER_JWKS: without identity a buyer is any name a body writes")
		}
		fmt.Fprintln(out, "buyers: not authenticated: a body's user_id is trusted (set SECKILL_BUYER_JWKS to require buyer tokens)")
		return nil, nil, nil
	}
	v, err := frontdoor.NewVerifier(ctx, b.JWKS, b.Audience, frontdoor.VerifierOptions{Log: log})
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "buyers: bearer tokens signed by the keys of %s (SECKILL_BUYER_JWKS), audience %q\n", b.JWKS, b.Audience)
	if b.Rate <= 0 {
		return v, nil, nil
	}
	l, err := frontdoor.NewLimiter(rdb, frontdoor.BuyerLimit{Rate: b.Rate, Burst: b.Burst}, frontdoor.Options{})
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "buyers: at most %g requests a second each, burst %d, across every instance (SECKILL_BUYER_RATE, SECKILL_BUYER_BURST)\n", b.Rate, b.Burst)
	return v, l, nil
}

// Service is the instance's service.
func (a *App) Service() *service.Service { return a.svc }

// Handler is the instance's HTTP API (package handler).
func (a *App) Handler() http.Handler { return a.handler }

// Store is the instance's store.
func (a *App) Store() *stock.Store { return a.store }

// Redis are the instance's Redis clients: the first holds admission, all of them vote on locks.
func (a *App) Redis() []redis.UniversalClient { return a.redis }

// Metrics is the instance's metrics registry, the one its /metrics serves.
func (a *App) Metrics() *prometheus.Registry { return a.metrics }

// Serve serves the handler on ln with the server's timeouts until ctx ends, then shuts down
// gracefully: it stops accepting, and waits up to the shutdown timeout for the requests in
// flight — orders inside their critical sections — to be answered.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	// The requests in flight are counted inside the handler, not by connection state: a
	// connection stays active a moment after its answer was sent, and an answer already heard
	// is not one the drain must give.
	var inFlight atomic.Int64
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		a.handler.ServeHTTP(w, r)
	})
	srv := &http.Server{
		Handler:           counted,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second, // longer than a proxy's keep-alive, so it closes first
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	// An event stream never ends by itself: the drain would wait for it until its timeout.
	// Shutdown ends them at once, and waits only for the orders in flight.
	srv.RegisterOnShutdown(a.events.Close)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down: draining in-flight requests", "requests", inFlight.Load(), "timeout", a.cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancel()
	stop := srv.Shutdown
	if planted.On(planted.NoDrain) {
		stop = func(context.Context) error { return srv.Close() }
	}
	if err := stop(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	a.log.Info("stopped")
	return nil
}

// Close stops the service and closes the backends Open opened, the last opened first.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	return errors.Join(errs...)
}
