// Package lab runs the failures that distributed locks exist for, each beside the fix that
// stops it: a claim of the sources this project was made from (docs/sources.md, docs/lab.md),
// reproduced on real backends, measured, and judged. An experiment reproduces when its failing
// form fails and its fix holds; one that does not is a finding, not a flake to retry.
package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/embeddedetcd"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
	"github.com/flashsale/seckill/provenance"
)

// An Experiment is one claim: the failing form and the fix, run the same way.
type Experiment struct {
	Name  string
	Seed  string // where the claim is made: the source, by its short title in docs/sources.md, and its section
	Claim string // the claim, in a sentence
	// Fix is the line of code that makes the difference, for docs/lab.md and the report; for a
	// measurement, how the figures are taken.
	Fix string
	// Measures marks a measurement (throughput): Run returns Result.Measured — figures, and the
	// sources' claims judged against them one by one — not a failing form and a fix.
	Measures bool
	// Run runs both forms on env, within ctx, at env.Size.
	Run func(ctx context.Context, env *Env) (Result, error)
}

// Result is what an experiment measured.
type Result struct {
	Failing Outcome
	Fixed   Outcome
	// Measured is a measurement's result instead of Failing and Fixed (throughput): figures and
	// the claims judged against them, each on its own. A measurement reproduces nothing.
	Measured *Measurement `json:",omitempty"`
	// NotRun are the parts of the experiment that could not run here (a backend missing); the
	// rest ran and was judged without them.
	NotRun []Part `json:",omitempty"`
	Chart  Chart
}

// Reproduced reports whether the claim held: the failure happened, and the fix stopped it.
func (r Result) Reproduced() bool { return r.Measured == nil && r.Failing.Failed && !r.Fixed.Failed }

// Outcome is what one form did.
type Outcome struct {
	Form     string // what ran, e.g. "GET, then DEL"
	Happened string // what happened, with its figures
	Failed   bool   // the failure the experiment is about happened
}

// Measurement is what a measurement took and how the sources' claims fared against it.
type Measurement struct {
	Method   string // how the figures were taken
	Figures  string // the figures
	Complete bool   // every figure was taken: a claim judged on a missing one would mean nothing
	Claims   []Judgement
}

// Held is how many of the claims the figures bear out.
func (m Measurement) Held() int {
	n := 0
	for _, j := range m.Claims {
		if j.Held {
			n++
		}
	}
	return n
}

// Judgement is one claim held against one measured figure.
type Judgement struct {
	Claim    string // the claim and where it is made, e.g. "«Locks in practice»: Redis (Redisson) 10万+/s (100,000+)"
	Subject  string // what was measured for it, e.g. "one Redis (redsync)"
	Measured string // the figure it was judged on
	Held     bool   // the figure is what the claim says; false: the figure contradicts it
}

// Part is a part of an experiment that did not run, and why.
type Part struct {
	Name string // e.g. "ZooKeeper"
	Why  string
}

// Chart is one bar chart: a value per form or variant, in one unit.
type Chart struct {
	Title string
	Unit  string
	Bars  []Bar
}

// Bar is one value of a Chart; Failed bars are drawn as failures.
type Bar struct {
	Label  string
	Value  float64
	Failed bool
}

// Size is how large an experiment runs: small in CI, full from cmd/lab.
type Size int

const (
	Small Size = iota
	Full
)

// pick is small or full, by size.
func pick[T any](s Size, small, full T) T {
	if s == Small {
		return small
	}
	return full
}

// NotRun is an experiment that could not run here: a backend it needs is missing.
type NotRun struct{ Why string }

func (n *NotRun) Error() string { return "not run: " + n.Why }

// Env is the backends the experiments run on, opened by Open.
type Env struct {
	Size  Size
	Log   *slog.Logger
	Redis *redis.Client // nil: Redis did not answer (RedisErr says why)
	Store *stock.Store  // nil: MySQL/MariaDB did not answer (StoreErr says why)

	RedisErr, StoreErr error
	// DBVersion and RedisVersion are what the servers said they are ("" when they did not
	// answer): a figure is only worth the machine it was taken on.
	DBVersion, RedisVersion string
	// base is the configuration of every service instance an experiment starts (newInstance):
	// cmd/api's, on the lab's backends.
	base      app.Config
	instances atomic.Int64 // instances started, which names each
	prefix    string

	etcdMu    sync.Mutex // the lab's own etcd, started by the first instance when base names none
	etcd      *etcdserver.Member
	etcdDir   string
	etcdErr   error
	etcdTried bool

	queuesOnce sync.Once // the lab's directory of the instances' embedded NATS servers, when base names none
	queues     string
	queuesErr  error
}

// Options say where the backends are and how the service instances of the experiments run.
type Options struct {
	// Config is the configuration of every service instance an experiment starts, as cmd/api
	// reads it (start from app.Defaults); its database and first Redis address are also the
	// lab's own. An experiment changes only what it is about. With no etcd endpoints the
	// instances share an etcd the lab starts in-process.
	Config app.Config
	Size   Size
	Log    *slog.Logger
}

// Open connects to the database and the Redis that o.Config names, the way a service instance
// does (app.OpenStore, redisclient.NewSingle); it creates the MySQL database if it is missing,
// and migrates it. One that does not answer is recorded, not fatal: the experiments that need
// it report that they did not run.
func Open(ctx context.Context, o Options) *Env {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	env := &Env{Size: o.Size, Log: o.Log, base: o.Config, prefix: fmt.Sprintf("lab-%x", time.Now().UnixNano()),
		RedisErr: errors.New("no Redis configured"), StoreErr: errors.New("no MySQL/MariaDB")}
	openCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if len(o.Config.RedisAddrs) > 0 {
		addr := o.Config.RedisAddrs[0]
		rdb := redisclient.NewSingle(addr)
		if err := rdb.Ping(openCtx).Err(); err != nil {
			_ = rdb.Close()
			env.RedisErr = fmt.Errorf("Redis at %s: %w (start it: redis-server --daemonize yes)", addr, err)
		} else {
			env.Redis = rdb
		}
	}
	env.Store, env.StoreErr = openStore(openCtx, o.Config, o.Log)
	if env.Store != nil {
		if db, err := sql.Open("mysql", o.Config.MySQLDSN); err == nil {
			env.DBVersion = provenance.DBVersion(openCtx, db)
			_ = db.Close()
		}
	}
	if env.Redis != nil {
		env.RedisVersion = provenance.RedisVersion(openCtx, env.Redis)
	}
	return env
}

func openStore(ctx context.Context, cfg app.Config, log *slog.Logger) (*stock.Store, error) {
	how := "(start it: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd)"
	if cfg.MySQLDSN != "" {
		if err := stock.CreateDatabase(ctx, cfg.MySQLDSN); err != nil {
			return nil, fmt.Errorf("MySQL/MariaDB: %w %s", err, how)
		}
	}
	s, err := app.OpenStore(ctx, cfg, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("MySQL/MariaDB: %w %s", err, how)
	}
	if err := s.Migrate(ctx, log); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// etcdEndpoints are the endpoints of the instances' etcd: the configured ones, or the lab's
// own, started in-process by the first instance that asks — instances must share one etcd, as
// a deployment's do.
func (e *Env) etcdEndpoints() ([]string, error) {
	if len(e.base.EtcdEndpoints) > 0 {
		return e.base.EtcdEndpoints, nil
	}
	e.etcdMu.Lock()
	defer e.etcdMu.Unlock()
	if !e.etcdTried {
		e.etcdTried = true
		if e.etcdDir, e.etcdErr = os.MkdirTemp("", "seckill-lab-etcd-"); e.etcdErr == nil {
			e.etcd, e.etcdErr = embeddedetcd.Start(e.etcdDir)
		}
	}
	if e.etcdErr != nil {
		return nil, fmt.Errorf("the lab's etcd: %w", e.etcdErr)
	}
	return etcdserver.Endpoints(e.etcd), nil
}

// queueDir is where the instance named name keeps its embedded NATS server's store: one
// directory each, since two servers on one store would corrupt it.
func (e *Env) queueDir(name string) (string, error) {
	e.queuesOnce.Do(func() { e.queues, e.queuesErr = os.MkdirTemp("", "seckill-lab-nats-") })
	if e.queuesErr != nil {
		return "", fmt.Errorf("the lab's NATS directory: %w", e.queuesErr)
	}
	return filepath.Join(e.queues, strings.NewReplacer("/", "_", "#", "_").Replace(name)), nil
}

// Close closes the backends, and stops the lab's etcd if an instance started it.
func (e *Env) Close() error {
	var errs []error
	e.etcdMu.Lock()
	if e.etcd != nil {
		e.etcd.Close()
	}
	if e.etcdDir != "" {
		errs = append(errs, os.RemoveAll(e.etcdDir))
	}
	e.etcdMu.Unlock()
	if e.queues != "" {
		errs = append(errs, os.RemoveAll(e.queues))
	}
	if e.Redis != nil {
		errs = append(errs, e.Redis.Close())
	}
	if e.Store != nil {
		errs = append(errs, e.Store.Close())
	}
	return errors.Join(errs...)
}

// key is a name of this run for an experiment's keys and locks, so that runs never meet.
func (e *Env) key(experiment, name string) string {
	return fmt.Sprintf("%s-%s-%s", e.prefix, experiment, name)
}

// needRedis and needStore return a *NotRun when the backend is missing.
func (e *Env) needRedis() error {
	if e.Redis == nil {
		return &NotRun{Why: e.RedisErr.Error()}
	}
	return nil
}

func (e *Env) needStore() error {
	if e.Store == nil {
		return &NotRun{Why: e.StoreErr.Error()}
	}
	return nil
}

// Experiments is every experiment, in the order the lab runs them.
func Experiments() []Experiment {
	return []Experiment{failover(), dbFailover(), ttl(), pause(), unlockRace(), setnxExpire(), lockTableNoExpiry(), reentrancy(), redlockValidity(), herd(), pool(), waitingRoom(), queueCrash(), crossedCheckouts(), throughput()}
}

// Find returns the experiments named, or all of them for "all" or no name.
func Find(names []string) ([]Experiment, error) {
	all := Experiments()
	if len(names) == 0 || (len(names) == 1 && names[0] == "all") {
		return all, nil
	}
	var out []Experiment
	for _, n := range names {
		found := false
		for _, e := range all {
			if e.Name == n {
				out = append(out, e)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no experiment %q (lab -list names them)", n)
		}
	}
	return out, nil
}
