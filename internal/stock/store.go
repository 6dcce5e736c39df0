package stock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/migrations"
)

// Dialect names the SQL database behind a Store.
type Dialect string

// The dialects a Store speaks.
const (
	MySQL  Dialect = "mysql"
	SQLite Dialect = "sqlite"
)

// Store is the SQL store. It is safe for concurrent use; each Store owns its connection pools,
// so two Stores on one database behave like two service instances.
type Store struct {
	db      *gorm.DB
	dialect Dialect
	// queue is the pool of the sections that wait for a row lock (PlaceLocked, WaitForRow). On
	// MySQL it is small and only its sessions carry the lock wait. On SQLite (no row locks) it
	// takes the file's write lock or fails at once (busy_timeout 0), and the strategy retries.
	queue      *gorm.DB
	galera     bool         // a Galera node: reads wait for it (readCausally)
	statements atomic.Int64 // what a feature costs the database is counted, not guessed
}

// countStatements counts every statement of both pools in s.statements, by a gorm callback.
func (s *Store) countStatements() error {
	count := func(*gorm.DB) { s.statements.Add(1) }
	for _, db := range []*gorm.DB{s.db, s.queue} {
		cb := db.Callback()
		for _, err := range []error{
			cb.Query().After("*").Register("seckill:count", count),
			cb.Row().After("*").Register("seckill:count", count),
			cb.Raw().After("*").Register("seckill:count", count),
			cb.Create().After("*").Register("seckill:count", count),
			cb.Update().After("*").Register("seckill:count", count),
			cb.Delete().After("*").Register("seckill:count", count),
		} {
			if err != nil {
				return fmt.Errorf("count statements: %w", err)
			}
		}
	}
	return nil
}

// Statements is how many statements this store has sent since it opened.
func (s *Store) Statements() int64 { return s.statements.Load() }

// Options tune a Store's connection pool; app.Defaults has the service's. Every field is
// required where it applies (IdleTx and LockWait: MySQL only).
type Options struct {
	MaxOpenConns int
	LockWait     time.Duration // how long the pessimistic section waits for the row lock with WaitForRow (MySQL: whole seconds, at least 1)
	// IdleTx bounds how long the server keeps a transaction of this store open while it waits
	// for the client (MySQL: whole seconds, at least 1). See boundIdleTransactions.
	IdleTx time.Duration
}

func (o Options) check(mysql bool) error {
	if o.MaxOpenConns <= 0 || mysql && (o.LockWait <= 0 || o.IdleTx <= 0) {
		return fmt.Errorf("store options %+v: a pool size, and on MySQL a lock wait and an idle-transaction bound, are required", o)
	}
	return nil
}

// seconds is d in whole seconds, at least 1, as the server variables take it.
func seconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// pool opens a gorm pool of at most open connections, keeping up to idle of them idle for at
// most idleTime, each for at most lifetime (0: no bound).
func pool(d gorm.Dialector, open, idle int, idleTime, lifetime time.Duration) (*gorm.DB, error) {
	// A fresh config for each pool: gorm keeps the pool inside the config it is given, so a
	// shared one would make every Store share the last pool.
	db, err := gorm.Open(d, &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true, // every write that needs a transaction opens one explicitly
	})
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(open)
	sqlDB.SetMaxIdleConns(idle)
	sqlDB.SetConnMaxIdleTime(idleTime)
	sqlDB.SetConnMaxLifetime(lifetime)
	return db, nil
}

// OpenMySQL connects to MySQL or MariaDB. The DSN is normalised: parseTime on, times in UTC,
// arguments interpolated by the client.
func OpenMySQL(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if err := opts.check(true); err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// Else every statement with arguments is prepared, executed, closed: three round trips under
	// a lock where one does. Safe with utf8mb4 (the driver refuses it only for GBK, SJIS, ...).
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	probe, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	defer probe.Close()
	maxIdle, err := boundIdleTransactions(ctx, probe, cfg, seconds(opts.IdleTx))
	if err != nil {
		return nil, err
	}
	galera, err := readCausally(ctx, probe, cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{dialect: MySQL, galera: galera}
	if s.db, err = pool(gormmysql.Open(cfg.FormatDSN()), opts.MaxOpenConns, opts.MaxOpenConns, maxIdle, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	// A waiting section holds one connection per hot SKU and instance: a few are plenty.
	queueCfg := cfg.Clone()
	queueCfg.Params["innodb_lock_wait_timeout"] = strconv.Itoa(seconds(opts.LockWait))
	if s.queue, err = pool(gormmysql.Open(queueCfg.FormatDSN()), max(2, opts.MaxOpenConns/4), 2, maxIdle, 5*time.Minute); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	return s.start(ctx)
}

// start counts the store's statements and checks that its database answers; on failure it
// closes the store.
func (s *Store) start(ctx context.Context) (*Store, error) {
	err := s.countStatements()
	if err == nil {
		err = s.Ping(ctx)
	}
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// boundIdleTransactions has the server end a transaction of this store that waits for its
// client longer than seconds (a session variable in cfg.Params). Else one stopped instance (GC
// pause, frozen VM, SIGSTOP) holding a row lock mid-transaction freezes the sale for everyone.
// MariaDB's idle_transaction_timeout rolls it back, so the late COMMIT fails. MySQL 8 has only
// wait_timeout, idle in or out of a transaction, so the pool keeps no idle connection that long
// (the returned bound). Our transactions never wait on the client, so a live holder is not cut.
func boundIdleTransactions(ctx context.Context, probe *sql.DB, cfg *mysql.Config, seconds int) (maxIdle time.Duration, err error) {
	var version string
	if err := probe.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return 0, fmt.Errorf("mysql version: %w", classify(err))
	}
	if strings.Contains(version, "MariaDB") {
		cfg.Params["idle_transaction_timeout"] = strconv.Itoa(seconds)
		return 0, nil
	}
	cfg.Params["wait_timeout"] = strconv.Itoa(seconds)
	return time.Duration(seconds) * time.Second / 2, nil
}

// OpenSQLite opens (creating if needed) the embedded SQLite database file at path.
func OpenSQLite(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := opts.check(false); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// WAL lets readers run beside the one writer; _txlock=immediate takes the write lock when a
	// transaction begins, so two writers never deadlock upgrading read locks.
	open := func(busyTimeoutMS int) (*gorm.DB, error) {
		dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate",
			path, busyTimeoutMS)
		db, err := pool(sqlite.Open(dsn), opts.MaxOpenConns, opts.MaxOpenConns, 0, 0)
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		return db, nil
	}
	s := &Store{dialect: SQLite}
	var err error
	if s.db, err = open(5000); err != nil {
		return nil, err
	}
	if s.queue, err = open(0); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s.start(ctx)
}

// Collector exports the connection pool's statistics (open, in use, idle, waits) as Prometheus
// metrics named go_sql_*{db_name="seckill"}: a pool that only grows is a leak.
func (s *Store) Collector() (prometheus.Collector, error) {
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	return collectors.NewDBStatsCollector(sqlDB, "seckill"), nil
}

// Dialect reports which database the store talks to.
func (s *Store) Dialect() Dialect { return s.dialect }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s: %w", s.dialect, classify(err))
	}
	return nil
}

// Close closes the store's connection pools.
func (s *Store) Close() error {
	var errs []error
	for _, db := range []*gorm.DB{s.db, s.queue} {
		if db == nil { // a store whose opening failed
			continue
		}
		sqlDB, err := db.DB()
		if err == nil {
			err = sqlDB.Close()
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Migrate applies the embedded migrations for the store's dialect. On MySQL it holds goose's
// table lock while it runs, so several instances starting at once migrate exactly once.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	fsys, err := fs.Sub(migrations.FS, string(s.dialect))
	if err != nil {
		return err
	}
	opts := []goose.ProviderOption{goose.WithSlog(log)}
	dialect := goose.DialectSQLite3
	if s.dialect == MySQL {
		dialect = goose.DialectMySQL
		locker, err := lock.NewMySQLTableLocker(lock.WithTableLockTimeout(200*time.Millisecond, 600))
		if err != nil {
			return err
		}
		opts = append(opts, goose.WithLocker(locker))
	}
	provider, err := goose.NewProvider(dialect, sqlDB, fsys, opts...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", s.dialect, err)
	}
	return nil
}

// withTx runs fn in one transaction on db and classifies its error. A session the server ended
// (idle past its bound, or killed) while the database still serves is busy, not unavailable: the
// order may be tried again at once. Ended in fn, it wrote nothing; ended at its COMMIT, its
// outcome is unknown (ErrOutcomeUnknown).
func (s *Store) withTx(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) error {
	inBody := false
	err := classify(db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		err := fn(tx)
		inBody = err != nil
		return err
	}))
	if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil || planted.On(planted.EndedAsUnavailable) {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if s.Ready(readyCtx) != nil {
		return err // the database does not serve: unavailable indeed
	}
	ended := fmt.Errorf("the database ended the transaction: %v", err) // %v: no longer ErrUnavailable
	if !inBody {
		ended = fmt.Errorf("%w at its COMMIT: %w", ErrOutcomeUnknown, ended)
	}
	return Busy(BusyTxEnded, ended)
}

// CreateDatabase creates the database that dsn names, if it does not exist, with the character
// set and collation the migrations expect: for tools that bring their own database (the lab).
func CreateDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("parse mysql dsn: %w", err)
	}
	name := cfg.DBName
	if name == "" || strings.ContainsRune(name, '`') {
		return fmt.Errorf("mysql dsn: database name %q", name)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	return err
}
