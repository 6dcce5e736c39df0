// Command api is the seckill service: it loads its configuration, has package app open the
// backends (real ones when configured, embedded ones otherwise) and build the service and the
// router on them, and serves until SIGINT or SIGTERM, then drains in-flight orders before it
// exits.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/app"
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

	a, err := app.Open(ctx, cfg.Config, log, stdout)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	if cfg.tokenGenerated {
		fmt.Fprintf(stdout, "admin token (generated, shown once): %s\n", cfg.AdminToken)
	}
	fmt.Fprintf(stdout, "strategies: %v (default %s)\n", a.Service().Names(), cfg.Service.Strategy)
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	if cfg.PprofAddr != "" {
		stopPprof, err := servePprof(cfg.PprofAddr, stdout, log)
		if err != nil {
			_ = ln.Close()
			return err
		}
		defer stopPprof()
	}
	return a.Serve(ctx, ln)
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
