package runner

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/cpu"
	"github.com/flashsale/seckill/loadtest/report"
	"github.com/flashsale/seckill/loadtest/verify"
)

// errSoldOut ends a baseline buyer who found no stock.
var errSoldOut = errors.New("sold out")

// baselineMaxPool caps the baseline's connection pool, however many clients the run has. The
// classic transaction serialises on the one hot row: more connections only move the queue from
// the pool into InnoDB's lock queue. Measured on this 2-core machine with MariaDB 10.11, 3000
// transactions on one row went 1.4–1.9k/s at 4, 8, 16, 32 and 64 connections alike — flat, the
// spread noise. 32 leaves MariaDB's default max_connections (151) room for three service
// processes beside it; with 512 clients the pool queues them, as a service's pool would. The
// baseline measures the transaction, not how many connections a server accepts.
const baselineMaxPool = 32

// baselineMinPool is the smallest pool the baseline still measures the transaction with (the
// flat stretch above starts at 4; 8 keeps a margin).
const baselineMinPool = 8

// dbSpare is how many connections the plan leaves free: each service process's start-up probe
// (stock.OpenMySQL reads the server's version on a connection of its own), an operator's mysql
// shell, a closed connection the server has not counted out yet.
const dbSpare = 4

// dbBudget is the plan of the run's database connections against the server's max_connections,
// made before anything starts: the service processes' pools at their fullest, the baseline's
// pool (which the verifier shares), and the connections others already hold.
type dbBudget struct {
	addr       string // the DSN's address, for the messages
	maxConns   int    // @@max_connections; 0 when the server could not be asked
	inUse      int    // connections open before the run, the tool's own probe aside
	services   int    // service processes the tool starts (0 with -target: theirs are open already)
	perService int    // connections each may open (servicePool)
	clients    int    // the most clients of the run (-concurrency)
	baseline   bool   // the run measures the baseline (-compare)
	pool       int    // the baseline's pool, sized to fit
	// tight is set when every pool at its fullest would not fit beside the connections in use.
	// The run goes ahead: the pools seldom fill (a batched section holds one connection per
	// product and instance), and the baseline runs while the service processes are idle, its
	// connections given back before they sell. A database that does refuse one then gets the
	// clear line of explain.
	tight bool
}

// String is the plan in one line, for the log.
func (b dbBudget) String() string {
	text := fmt.Sprintf("database %s: max_connections %d, %d in use before the run; the run needs %s", b.addr, b.maxConns, b.inUse, b.needs(b.pool))
	if b.tight {
		text = "warning: " + text + " with every pool full, which does not fit: if the database refuses connections, raise max_connections or lower -spawn"
	}
	return text
}

// needs says what the run needs with a baseline pool of pool, and the sum.
func (b dbBudget) needs(pool int) string {
	text := ""
	if b.services > 0 {
		text = fmt.Sprintf("%d service processes x %d (SECKILL_DB_MAX_CONNS and the pessimistic lock queue's pool) + ", b.services, b.perService)
	}
	what := "the verifier"
	if b.baseline {
		what = "the baseline's pool and the verifier"
	}
	return text + fmt.Sprintf("%d for %s + %d spare = %d", pool, what, dbSpare, b.services*b.perService+pool+dbSpare)
}

// least is the smallest baseline pool the run accepts.
func (b dbBudget) least() int {
	if !b.baseline {
		return 1
	}
	return min(b.clients, baselineMinPool)
}

// size fits the baseline's pool into what the server has left beside the service processes'
// pools: at most baselineMaxPool and the run's clients. When they leave less than least, the
// pool is least and the plan is tight; when not even least is free now, the run is refused in
// one line.
func (b dbBudget) size() (dbBudget, error) {
	now := b.maxConns - b.inUse - dbSpare
	if now < b.least() {
		return b, fmt.Errorf("database %s: max_connections is %d with %d connections in use: not even the baseline's %d fit; "+
			"raise max_connections or close some", b.addr, b.maxConns, b.inUse, b.least())
	}
	free := now - b.services*b.perService
	if free < b.least() {
		b.tight, free = true, b.least()
	}
	b.pool = 1
	if b.baseline {
		b.pool = min(b.clients, baselineMaxPool)
	}
	b.pool = min(b.pool, free)
	return b, nil
}

// explain turns an error from the database into one line that says what to do when the server
// refused a connection — too many connections, wrong credentials, nothing listening — and
// returns any other error as it is.
func (b dbBudget) explain(err error) error {
	var me *mysql.MySQLError
	var ne *net.OpError
	switch {
	case errors.As(err, &me) && (me.Number == 1040 || me.Number == 1203 || me.Number == 1226):
		limit := "max_connections is reached (other clients hold the connections)"
		switch {
		case me.Number != 1040: // the global max_user_connections, or the user's own limit
			limit = "the DSN's user is at its max_user_connections"
		case b.maxConns > 0:
			limit = "max_connections is " + strconv.Itoa(b.maxConns)
		}
		return fmt.Errorf("the database at %s refused a connection (%v): %s, and the run needs %s; raise it or lower -spawn",
			b.addr, me, limit, b.needs(max(b.pool, b.least())))
	case errors.As(err, &me) && slices.Contains([]uint16{1044, 1045, 1049, 1698}, me.Number): // access denied, unknown database
		return fmt.Errorf("the database at %s refused a connection (%v): check the -mysql DSN", b.addr, me)
	case errors.As(err, &ne) && ne.Op == "dial":
		return fmt.Errorf("cannot connect to the database at %s (%v)", b.addr, ne.Err)
	case errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn):
		return fmt.Errorf("the database at %s closed the connection (%v)", b.addr, err)
	}
	return err
}

// openDB opens the tool's pool on dsn without the driver's logger: on a refused or dropped
// connection it prints a line per attempt to stderr — hundreds at 512 clients — where the
// error the tool gets back already says it once.
func openDB(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

// createDatabase creates dsn's database when it is missing, as the service processes the tool
// starts would at their start (with the same character set and collation): the tool asks the
// database for its connection budget before they run, and a missing database would refuse it.
func createDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || cfg.DBName == "" {
		return err
	}
	name := cfg.DBName
	cfg.DBName = ""
	db, err := openDB(cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+strings.ReplaceAll(name, "`", "``")+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	return err
}

// servicePool is how many connections one service process the tool starts may open: its pool,
// SECKILL_DB_MAX_CONNS (README, Configuration; the processes inherit the tool's environment),
// and beside it the pessimistic strategy's lock-queue pool, a quarter of that and at least 2
// (stock.OpenMySQL).
func servicePool(getenv func(string) string) int {
	n, err := strconv.Atoi(getenv("SECKILL_DB_MAX_CONNS"))
	if err != nil || n < 1 {
		n = 32
	}
	return n + max(2, n/4)
}

// planConnections asks the database for its max_connections and the connections open now, and
// sizes the run into them (dbBudget.size), before anything starts.
func planConnections(ctx context.Context, db *sql.DB, o options, getenv func(string) string) (dbBudget, error) {
	b := dbBudget{clients: slices.Max(o.clients), baseline: o.compare}
	if cfg, err := mysql.ParseDSN(o.mysql); err == nil {
		b.addr = cfg.Addr
	}
	if o.targets == "" {
		b.services, b.perService = o.spawn, servicePool(getenv)
	}
	if err := db.QueryRowContext(ctx, "SELECT @@max_connections").Scan(&b.maxConns); err != nil {
		return b, b.explain(err)
	}
	var name string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Threads_connected'").Scan(&name, &b.inUse); err != nil {
		return b, b.explain(err)
	}
	b.inUse-- // the probe's own connection, which stays in the tool's pool
	return b.size()
}

// baseline is the yardstick of the performance targets: the classic per-order transaction —
// SELECT ... FOR UPDATE, UPDATE, INSERT, COMMIT — run straight against the database by clients
// buyers at a time on a pool of pool connections, no HTTP, no lock service. Every strategy's
// orders/s is reported as a ratio to it, measured in the same run at the same client count. It
// sells one unit to each of buyers users of sku (a product the caller created through the API)
// and returns the orders it placed, when it began and when its last sale committed. The first
// error other than sold out ends it.
func baseline(ctx context.Context, db *sql.DB, sku string, buyers, clients, pool int) (orders []verify.Order, began, lastSale time.Time, err error) {
	db.SetMaxOpenConns(pool)
	db.SetMaxIdleConns(pool)
	// Give the connections back afterwards: left idle, they would keep the service instances
	// that run next from theirs.
	defer db.SetMaxIdleConns(2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	users := make(chan int)
	go func() {
		defer close(users)
		for i := range buyers {
			select {
			case users <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	began = time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range users {
				user := fmt.Sprintf("%s-b%06d", sku, i)
				id, err := placeForUpdate(ctx, db, sku, user)
				mu.Lock()
				switch {
				case err == nil:
					orders = append(orders, verify.Order{OrderID: id, UserID: user})
					lastSale = time.Now()
				case !errors.Is(err, errSoldOut) && first == nil:
					first = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return orders, began, lastSale, first
}

// baselineReport runs the baseline on a fresh product and verifies it like any sale.
func (rr roundRunner) baselineReport(ctx context.Context, db *sql.DB, suffix string) (report.Row, error) {
	o := rr.opts
	sku := o.sku + "-baseline" + rr.pass.suffix + suffix
	if err := putProduct(ctx, rr.client, rr.targets[0], o.token, sku, o.stock, 0); err != nil {
		return report.Row{}, err
	}
	pool := min(rr.db.pool, o.concurrency) // sized for the run's most clients: fewer use fewer
	rec := rr.cpu.Start()
	orders, began, lastSale, err := baseline(ctx, db, sku, o.users, o.concurrency, pool)
	rec.Stop()
	if err != nil {
		return report.Row{}, fmt.Errorf("baseline: %w", rr.db.explain(err))
	}
	r := report.Row{Strategy: "baseline", SKU: sku, Clients: o.concurrency, Requests: o.users, Attempts: o.users,
		Family:   fmt.Sprintf("SQL: SELECT ... FOR UPDATE, UPDATE, INSERT per order (no HTTP); %d clients on a pool of %d connections", o.concurrency, pool),
		Outcomes: map[string]int{attack.OK: len(orders), attack.SoldOut: o.users - len(orders)}}
	if len(orders) > 0 && lastSale.After(began) {
		r.OrdersPerSecond = float64(len(orders)) / lastSale.Sub(began).Seconds()
		r.CPU = &cpu.Cost{Selling: rr.cpu.Phase(rec.Between(began, lastSale), len(orders))}
		r.Ceiling = report.NewCeiling(r.OrdersPerSecond, r.CPU.Selling, runtime.NumCPU())
	}
	if r.Verdict, err = rr.verifier.Verify(ctx, sku, orders); err != nil {
		return report.Row{}, fmt.Errorf("verify baseline: %w", err)
	}
	r.Judge()
	fmt.Fprintf(rr.log, "loadtest: baseline: %d orders at %.0f orders/s (%d clients, a pool of %d); %s\n",
		len(orders), r.OrdersPerSecond, o.concurrency, pool, r.VerdictText())
	return r, nil
}

// placeForUpdate is one order of the baseline: the row lock is held across three round trips.
func placeForUpdate(ctx context.Context, db *sql.DB, sku, user string) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	var stock int64
	if err := tx.QueryRowContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", sku).Scan(&stock); err != nil {
		return "", err
	}
	if stock < 1 {
		return "", errSoldOut
	}
	if _, err := tx.ExecContext(ctx, "UPDATE products SET stock = stock - 1, version = version + 1 WHERE sku = ?", sku); err != nil {
		return "", err
	}
	id := ulid.Make().String()
	hash := sha256.Sum256([]byte(sku + "/" + user))
	if _, err := tx.ExecContext(ctx,
		"INSERT INTO orders (order_id, sku, user_id, quantity, strategy, request_hash, created_at) VALUES (?, ?, ?, 1, 'baseline', ?, ?)",
		id, sku, user, hex.EncodeToString(hash[:]), time.Now().UTC()); err != nil {
		return "", err
	}
	return id, tx.Commit()
}
