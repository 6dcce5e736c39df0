// Command api is the seckill service: it loads its configuration, opens the backends (real ones
// when configured, embedded ones otherwise), builds the store, the strategies and the router,
// and serves until SIGINT or SIGTERM, then drains in-flight orders before it exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/handler"
	"github.com/flashsale/seckill/internal/service"
)

func main() {
	// go-redis logs through a package-level logger of its own (every refused dial while Redis is
	// down); send it to slog rather than raw to stderr. Set here, once per process, not in run.
	redis.SetLogger(redisLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

// run is the whole service; main and the tests call it. It returns when ctx is cancelled (after
// a graceful shutdown) or when the service cannot start or keep serving.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log := newLogger(cfg.LogFormat, stderr)
	slog.SetDefault(log) // libraries that log through slog's default (go-redis, above) follow the configured format
	cfg.print(stdout)

	store, err := openStore(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx, log); err != nil {
		return err
	}

	rdb, err := openRedis(ctx, cfg, stdout, log)
	if err != nil {
		return err
	}
	defer rdb.Close()

	etcd, err := openEtcd(cfg, stdout)
	if err != nil {
		return err
	}
	defer etcd.Close()

	zkConn, err := openZooKeeper(cfg, stdout, log)
	if err != nil {
		return err
	}
	if zkConn != nil {
		defer zkConn.Close()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc, err := service.New(cfg.Service, service.Backends{Store: store, Redis: rdb.clients, Etcd: etcd.client, ZooKeeper: zkConn}, log, reg)
	if err != nil {
		return err
	}
	defer svc.Close()

	h, err := handler.New(handler.Config{
		Sales:          svc,
		AdminToken:     cfg.AdminToken,
		Log:            log,
		Registerer:     reg,
		Gatherer:       reg,
		RateLimit:      handler.RateLimit{Rate: cfg.RateLimit, Burst: cfg.RateBurst},
		TrustedProxies: cfg.TrustedProxies,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second, // longer than a proxy's keep-alive, so it closes first
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if cfg.tokenGenerated {
		fmt.Fprintf(stdout, "admin token (generated, shown once): %s\n", cfg.AdminToken)
	}
	fmt.Fprintf(stdout, "strategies: %v (default %s)\n", svc.Names(), cfg.Service.Strategy)
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	if cfg.PprofAddr != "" {
		stopPprof, err := servePprof(cfg.PprofAddr, stdout, log)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stopPprof()
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// redisLogger adapts go-redis's logging to slog.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}
