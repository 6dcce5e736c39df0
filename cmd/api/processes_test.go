package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// service is the service binary, built once per test binary (buildService) in a directory of
// its own that TestMain removes.
var service struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildService returns cmd/api compiled for this test binary — once, whichever test asks first —
// with the bugs this test binary can plant (TestChecksCatchPlantedBugs), so that a planted bug
// runs in the processes too.
func buildService(t *testing.T) string {
	t.Helper()
	service.once.Do(func() {
		if service.dir, service.err = os.MkdirTemp("", "seckill-api-test-"); service.err != nil {
			return
		}
		bin := filepath.Join(service.dir, "seckill")
		tags := "freezepoints" // the service freezes itself where SECKILL_FREEZE_AT says (freezepoint)
		if planted.Built {
			tags += ",plantedbugs"
		}
		args := []string{"build", "-tags", tags, "-o", bin}
		if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
			service.err = fmt.Errorf("go build: %w: %s", err, out)
			return
		}
		service.bin = bin
	})
	require.NoError(t, service.err)
	return service.bin
}

// removeService removes the service binary, once every test has stopped its processes.
func removeService() {
	if service.dir != "" {
		_ = os.RemoveAll(service.dir)
	}
}

// processLog is what a service process wrote to stderr: its log, one JSON record a line
// (SECKILL_LOG_FORMAT=json), each stamped with the process's own time.
type processLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *processLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *processLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// said returns the lines the process logged msg on, each with its time.
func (l *processLog) said(msg string) []map[string]any {
	var lines []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			lines = append(lines, rec)
		}
	}
	return lines
}

// at returns when the process logged msg about sku, by its own clock.
func (l *processLog) at(t *testing.T, msg, sku string) []time.Time {
	t.Helper()
	var times []time.Time
	for _, line := range strings.Split(l.String(), "\n") {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			SKU  string    `json:"sku"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg && rec.SKU == sku {
			times = append(times, rec.Time)
		}
	}
	return times
}

// startProcess starts the service binary as a child process on the test database and waits
// until it listens. It is stopped with SIGTERM in t.Cleanup, and must exit cleanly.
func startProcess(t *testing.T, bin string, extraEnv ...string) instance {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), backendtest.Env(t)...),
		append([]string{"SECKILL_ADDR=127.0.0.1:0", "SECKILL_ADMIN_TOKEN=process-test", "SECKILL_LOG_FORMAT=json",
			"SECKILL_DB_MAX_CONNS=10"}, extraEnv...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &processLog{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var killed atomic.Bool
	t.Cleanup(func() {
		if killed.Load() {
			<-exited
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			assert.NoError(t, err, "the service exits cleanly on SIGTERM; stderr:\n%s", stderr)
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the service did not stop 30s after SIGTERM")
		}
	})
	select {
	case svc := <-watchOutput(t, stdout):
		svc.token = "process-test"
		svc.pid = cmd.Process.Pid
		svc.kill = func() { killed.Store(true); _ = cmd.Process.Kill() }
		svc.log = stderr
		return svc
	case err := <-exited:
		t.Fatalf("the service exited at start: %v\n%s", err, stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("the service did not listen within 60s\n%s", stderr)
	}
	return instance{}
}

// startThree builds the service and starts three processes of it, each with extraEnv, and on
// the test process's ZooKeeper, so that they offer the zookeeper strategy too.
func startThree(t *testing.T, extraEnv ...string) []instance {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the service and runs three processes; skipped with -short")
	}
	extraEnv = append(backendtest.ZooKeeperEnv(t), extraEnv...)
	bin := buildService(t)
	var procs []instance
	for range 3 {
		procs = append(procs, startProcess(t, bin, extraEnv...))
	}
	return procs
}

// putOnSale puts a fresh product with units on sale through svc and returns its SKU.
func putOnSale(t *testing.T, svc instance, units int) string {
	t.Helper()
	sku := backendtest.SKU(t)
	require.Equal(t, http.StatusOK, svc.call(t, "PUT", "/api/v1/products/"+sku, fmt.Sprintf(`{"name":%q,"stock":%d}`, t.Name(), units), nil))
	return sku
}

// assertSoldThrough checks the end of a sale: every unit sold, once, to a client that heard 201;
// every other buyer heard sold out; the invariant holds in SQL.
func assertSoldThrough(t *testing.T, res httpSale, sku string, units, buyers int) {
	t.Helper()
	assert.Equal(t, map[int]int{http.StatusCreated: units, http.StatusConflict: buyers - units}, res.status)
	assert.Zero(t, res.unavailable, "buyers heard 503")
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
	assert.Zero(t, a.Stock, "every unit sold")
}

// TestProcesses runs the sale across three service processes on one database, over HTTP, for
// every safe strategy: exactly the stock is sold, the invariant holds in SQL, and every 201 has
// its order row — under queued, every 202 is followed until it ends, and is a sale once placed.
// It logs each strategy's orders/s.
func TestProcesses(t *testing.T) {
	procs := startThree(t)
	const (
		units   = 100
		buyers  = 300
		clients = 48
	)
	for _, strategy := range safeStrategies {
		t.Run(strategy, func(t *testing.T) {
			offered(t, strategy)
			sku := putOnSale(t, procs[0], units)
			admittedBefore := scrape(t, procs, `seckill_admission_total{result="sold_out"}`)
			res := loadHTTP(t, procs, sku, strategy, userRange{0, buyers}, clients, httpFault{})
			soldIn := res.lastSale.Sub(res.start)
			t.Logf("%s, 3 processes, %d clients: %d orders in %s = %.0f orders/s, request latency p50 %s p99 %s; %d sold_out (%.0f%% answered by Redis admission), %d busy retries, %s total",
				strategy, clients, len(res.acked), soldIn.Round(time.Millisecond), float64(len(res.acked))/soldIn.Seconds(),
				res.percentile(50), res.percentile(99),
				res.status[http.StatusConflict], 100*(scrape(t, procs, `seckill_admission_total{result="sold_out"}`)-admittedBefore)/float64(res.status[http.StatusConflict]),
				res.busy, res.end.Sub(res.start).Round(time.Millisecond))
			assert.Zero(t, res.transportErrors)
			assertSoldThrough(t, res, sku, units, buyers)
		})
	}
}

// TestProcessesLockServiceKill SIGKILLs one of three processes mid-sale, under each lock
// service, while it holds the lock: until the kill only that process sells, it is killed the
// moment the lock service shows its key (etcd) or node (ZooKeeper), and a key or node read right
// after the kill, before any other process has taken an order, shows it held the lock when it
// died. Nobody is left to give that lock back — its etcd lease is not revoked, its ZooKeeper
// session not closed — so it lasts until the lease or the session expires: that is seen on the
// lock service (the key or node gone), and the others must be selling again within 3 s of that
// expiry's bound — the lock TTL past the last keep-alive, and the half second in which the lock
// service notices — by the times their sections placed the orders (created_at). Clients whose
// request died with the process retry it, with the same Idempotency-Key, on another process.
// Nothing is oversold, every unit sells, no buyer hears a 500. A kill that did not catch the
// lock held is sold again (each sale judged), up to three times.
func TestProcessesLockServiceKill(t *testing.T) {
	for _, strategy := range []string{"etcd", "zookeeper"} {
		t.Run(strategy, func(t *testing.T) {
			offered(t, strategy)
			const units, buyers, clients, tries = 60, 150, 24, 3
			// expiry bounds how long the dead process's lock outlives it: its lease or session
			// lasts the lock TTL (SECKILL_LOCK_TTL, below) past its last keep-alive, and the lock
			// service notices within half a second (etcd revokes expired leases every 500 ms,
			// ZooKeeper checks sessions every tick, 500 ms on the test's servers). The stall bound
			// is No frozen sale's 3 s past it: TestProcessesFrozenInstance holds the same leases
			// to 3 s from the stop; a kill that falls just after a keep-alive lands the others'
			// first sale about 2.4 s after it, too close to 3 s to be a check on a loaded machine.
			const expiry = 2*time.Second + 500*time.Millisecond
			for try := 1; ; try++ {
				procs := startThree(t, "SECKILL_LOCK_TTL=2s", "SECKILL_LOCK_WAIT=3s")
				sku := putOnSale(t, procs[0], units)
				probe := newLockProbe(t, strategy, sku)
				var (
					killed time.Time
					holder string // who held the lock right after the kill: the dead process, the only one that took it
				)
				res := loadHTTP(t, procs, sku, strategy, userRange{0, buyers}, clients, httpFault{at: units / 4, only: &procs[1], inject: func() {
					for until := time.Now().Add(2 * time.Second); probe.holder() == "" && time.Now().Before(until); {
					}
					killed = time.Now()
					procs[1].kill()
					holder = probe.holder()
				}})
				held := holder != ""
				if held {
					// Nobody else could end its hold: only the lease or the session running out.
					expired := false
					for until := time.Now().Add(10 * time.Second); !expired && time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
						expired = !probe.holds(holder)
					}
					assert.True(t, expired, "the dead process's lock (%s) never expired", holder)
				}
				var after []time.Time
				for _, at := range placedAt(t, backendtest.SQL(t), sku) {
					if at.After(killed) {
						after = append(after, at)
					}
				}
				stall := time.Duration(0)
				if len(after) > 0 {
					stall = longestGap(after, killed, slices.MaxFunc(after, time.Time.Compare))
				}
				t.Logf("%s, try %d: one of 3 processes SIGKILLed mid-sale holding the lock: %t (%s); %v, %d busy retries, %d requests lost with the process and retried elsewhere; the others' longest gap between sales after the kill %s (their sections' times), %s in all",
					strategy, try, held, holder, res.status, res.busy, res.transportErrors, stall.Round(10*time.Millisecond), res.end.Sub(res.start).Round(time.Millisecond))
				assertSoldThrough(t, res, sku, units, buyers)
				assert.NotEmpty(t, after, "nothing sold after the kill")
				assert.Less(t, stall, expiry+3*time.Second, "the others sold again within 3 s of the dead lock's expiry")
				if held {
					break
				}
				require.Less(t, try, tries, "the killed process never held the lock when it was killed, in %d sales: the case was not exercised", tries)
			}
		})
	}
}

// offered skips a zookeeper subtest, saying why, where the processes could not be given a
// ZooKeeper (it fails instead when real backends are required).
func offered(t *testing.T, strategy string) {
	t.Helper()
	backendtest.ZooKeeperFor(t, strategy)
}

// frozenSale is what the buyers of one frozen-instance sale saw.
type frozenSale struct {
	acked     []stock.Order
	elsewhere []string // the orders the other processes answered 201
	status    map[int]int
	holder    string // who held the strategy's lock (or, pessimistic, the row) right after the stop: lockProbe.holder
	released  bool   // that hold had ended when the process was resumed
}

// longestGap is the longest time in [from, to] with none of sales in it.
func longestGap(sales []time.Time, from, to time.Time) time.Duration {
	last, longest := from, time.Duration(0)
	for _, at := range slices.SortedFunc(slices.Values(sales), time.Time.Compare) {
		if at.Before(from) || at.After(to) {
			continue
		}
		longest = max(longest, at.Sub(last))
		last = at
	}
	return max(longest, to.Sub(last))
}

// placedAt reads when each order of sku was placed, by the clock of the process that placed
// it: the created_at its section wrote (DATETIME(6): to the microsecond), the moment of the
// sale — not when its answer reached a client, which on a loaded machine may be starved for
// longer than the promise being measured.
func placedAt(t *testing.T, db *sql.DB, sku string) map[string]time.Time {
	t.Helper()
	rows, err := db.Query("SELECT order_id, created_at FROM orders WHERE sku = ?", sku)
	require.NoError(t, err)
	defer rows.Close()
	at := map[string]time.Time{}
	for rows.Next() {
		var id string
		var created any
		require.NoError(t, rows.Scan(&id, &created))
		at[id] = dbTime(t, created)
	}
	require.NoError(t, rows.Err())
	return at
}

// dbTime reads a DATETIME column as the driver returns it: MySQL's text (the DSN does not
// parse times) in UTC, as the store writes it, or SQLite's time.
func dbTime(t *testing.T, v any) time.Time {
	t.Helper()
	switch v := v.(type) {
	case time.Time:
		return v
	case []byte:
		return dbTime(t, string(v))
	case string:
		for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999-07:00", time.RFC3339Nano} {
			if at, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
				return at
			}
		}
	}
	t.Fatalf("a database time the test cannot read: %#v", v)
	return time.Time{}
}

// timesOf are the times of orders, from at.
func timesOf(t *testing.T, orders []string, at map[string]time.Time) []time.Time {
	t.Helper()
	var times []time.Time
	for _, id := range orders {
		when, ok := at[id]
		require.True(t, ok, "order %s was answered 201 and has no row", id)
		times = append(times, when)
	}
	return times
}

// sellAcrossFreeze has clients buy on the victim alone — enough of them that its queue never
// runs dry, so that its sections follow each other and it is most likely inside one, lock held
// or row locked — until it has sold a hundred orders; then it is stopped (SIGSTOP) the moment it
// is seen holding the lock, for pause, and clients buy on the other processes meanwhile; just
// before it is resumed, the hold it had at the stop is read again: it must have ended (a lease,
// a key or a transaction that outlives the stop freezes the sale); then every buyer finishes the
// purchase it is on — the victim's buyers, stopped with it, too: its late writes are made. Each
// buys with the one HTTP buyer, so every 201 is accounted for.
func sellAcrossFreeze(t *testing.T, procs []instance, victim int, sku, strategy string, pause time.Duration,
	probe lockProbe) (frozenSale, time.Time, time.Time) {
	t.Helper()
	deadline, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := buyer{t: t, ctx: deadline, client: &http.Client{Timeout: 30 * time.Second}, sku: sku, strategy: strategy}
	var (
		mu       sync.Mutex
		res      = frozenSale{status: map[int]int{}}
		wg       sync.WaitGroup
		stopping atomic.Bool
		sold     int // by the victim
		selling  = make(chan struct{})
	)
	var others []instance
	for i, p := range procs {
		if i != victim {
			others = append(others, p)
		}
	}
	buy := func(group string, id int, targets []instance) {
		defer wg.Done()
		for n := 0; !stopping.Load(); n++ {
			user := fmt.Sprintf("%s-%02d-%05d", group, id, n)
			a, target, ok := b.buy(user, func(attempt int) instance { return targets[(id+attempt)%len(targets)] }, nil)
			if !ok {
				return
			}
			mu.Lock()
			res.status[a.status]++
			if a.status == http.StatusCreated {
				res.acked = append(res.acked, a.order)
				if target.pid != procs[victim].pid {
					res.elsewhere = append(res.elsewhere, a.order.OrderID)
				} else if sold++; sold == 100 {
					close(selling)
				}
			}
			mu.Unlock()
		}
	}
	for i := range 32 {
		wg.Add(1)
		go buy("victim", i, procs[victim:victim+1])
	}
	select {
	case <-selling:
	case <-deadline.Done():
		t.Fatal("the victim did not sell a hundred orders within two minutes")
	}
	// Stop it the moment it is seen holding the lock, and look again once it is stopped. A row
	// lock is held only for the few milliseconds of a transaction, often ended between the look
	// and the stop: then it goes on at once (a stop of a few milliseconds, while it sells alone)
	// and is looked at again, for up to five seconds.
	var frozen time.Time
	for until := time.Now().Add(5 * time.Second); ; {
		for probe.holder() == "" && time.Now().Before(until) {
		}
		frozen = time.Now()
		require.NoError(t, syscall.Kill(procs[victim].pid, syscall.SIGSTOP))
		if res.holder = probe.holder(); res.holder != "" || !time.Now().Before(until) {
			break
		}
		require.NoError(t, syscall.Kill(procs[victim].pid, syscall.SIGCONT))
	}
	for i := range 16 {
		wg.Add(1)
		go buy("others", i, others)
	}
	time.Sleep(pause - time.Since(frozen)) // the stop lasts pause, whatever happens meanwhile: it is the fault
	res.released = res.holder != "" && !probe.holds(res.holder)
	resumed := time.Now()
	require.NoError(t, syscall.Kill(procs[victim].pid, syscall.SIGCONT))
	stopping.Store(true)
	wg.Wait()
	return res, frozen, resumed
}

// lockProbe reads who holds sku's lock under its strategy, with the process that sells frozen —
// the only one that sold until then, so that the holder it finds is that process: the Redis lock
// key's token, the etcd mutex's first key and its revision, the ZooKeeper lock's first node, the
// lock-table row's holder, or (pessimistic) the transactions that hold rows of the test's
// database while the product's row lock is taken — probed with NOWAIT, which takes the row for
// a moment when it is free: the process's next transaction finds it taken that moment and tries
// again, so the probe may be asked again and again like the others, which take nothing.
type lockProbe struct {
	holder func() string            // who holds the lock now; "" when nobody does
	holds  func(holder string) bool // whether holder (one holder reads) still holds it
}

func newLockProbe(t *testing.T, strategy, sku string) lockProbe {
	t.Helper()
	ctx := context.Background()
	var holder func() string
	switch strategy {
	case "hybrid":
		r := backendtest.Redis(t)
		holder = func() string {
			token, err := r.Get(ctx, "seckill:{"+sku+"}:lock").Result()
			if errors.Is(err, redis.Nil) {
				return ""
			}
			require.NoError(t, err)
			return token
		}
	case "etcd":
		c := backendtest.Etcd(t)
		holder = func() string {
			resp, err := c.Get(ctx, "/seckill/locks/"+sku+"/", clientv3.WithFirstCreate()...)
			require.NoError(t, err)
			if len(resp.Kvs) == 0 {
				return ""
			}
			return fmt.Sprintf("%s@%d", resp.Kvs[0].Key, resp.Kvs[0].CreateRevision)
		}
	case "zookeeper":
		c := backendtest.ZooKeeper(t, backendtest.ZooKeeperServers(t), time.Second)
		holder = func() string {
			nodes, _, err := c.Children("/seckill/locks/" + sku)
			if errors.Is(err, zk.ErrNoNode) || len(nodes) == 0 {
				return ""
			}
			require.NoError(t, err)
			// Sequential nodes end in their sequence number, ten digits: the lowest holds the lock.
			return slices.MinFunc(nodes, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
		}
	case "dblock":
		return tableLockProbe(t, backendtest.SQL(t), sku)
	default:
		return rowLockProbe(t, backendtest.SQL(t), sku)
	}
	return lockProbe{holder: holder, holds: func(h string) bool { return holder() == h }}
}

// tableLockProbe is dblock's lockProbe on db: the holder of the lock table's row.
func tableLockProbe(t *testing.T, db *sql.DB, sku string) lockProbe {
	t.Helper()
	holder := func() string {
		var h string
		err := db.QueryRowContext(context.Background(), "SELECT holder FROM distributed_locks WHERE lock_name = ?", "products/"+sku).Scan(&h)
		if errors.Is(err, sql.ErrNoRows) {
			return ""
		}
		require.NoError(t, err)
		return h
	}
	return lockProbe{holder: holder, holds: func(h string) bool { return holder() == h }}
}

// rowLockProbe is pessimistic's lockProbe: the row lock's holder is the set of transactions
// holding rows in the test's database (information_schema.INNODB_TRX), and it holds as long as
// one of them is open — the server ends it as idle (the idle-transaction bound) when its
// process stops.
func rowLockProbe(t *testing.T, db *sql.DB, sku string) lockProbe {
	t.Helper()
	ctx := context.Background()
	open := func() []string {
		rows, err := db.QueryContext(ctx, `SELECT t.trx_id FROM information_schema.INNODB_TRX t
			JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
			WHERE p.DB = DATABASE() AND t.trx_rows_locked > 0 ORDER BY t.trx_id`)
		require.NoError(t, err)
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		return ids
	}
	return lockProbe{
		holder: func() string {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE NOWAIT", sku)
			_ = tx.Rollback()
			if err == nil {
				return ""
			}
			return strings.Join(open(), ",")
		},
		holds: func(h string) bool {
			for _, id := range open() {
				if slices.Contains(strings.Split(h, ","), id) {
					return true
				}
			}
			return false
		},
	}
}

// TestProcessesFrozenInstance stops one of three processes with SIGSTOP in the middle of a sale
// — a GC pause, a frozen VM — for longer than the lock TTL and the database's idle-transaction
// bound, under every strategy that locks inside the request, while it holds its lock: the Redis
// lock, the etcd lease, the ZooKeeper session, the lock-table row, or the product's row lock —
// its watchdog, keep-alive and pings frozen too. Its hold must end while it is stopped (the key
// expires, the lease or the session runs out, the row is reclaimed, the server ends the idle
// transaction: seen on the lock service or the database), and the other processes must be
// selling again within 3 s: the longest gap between their sales while it is stopped, measured by
// the times their sections placed the orders (created_at), is under 3 s. When the frozen one
// wakes, a write it was about to make must be refused by its guard: a write computed before the
// freeze and made after it would leave the stock out of step with the orders, which
// RequireInvariant catches whatever the product's size (stock + active orders == initial
// stock). The refusals the process counts (its lock found gone, its write fenced out, its
// transaction ended by the server) are logged: whether there is one depends on where in its
// section the stop fell. Every 201 has its row, and no buyer hears a 500. Each try is judged;
// the freeze is tried up to five times until it catches the process holding the lock, so that
// the case measured is the worst one.
func TestProcessesFrozenInstance(t *testing.T) {
	procs := startThree(t)
	const pause = 5 * time.Second
	// Not queued: its request takes no lock — a 202 never waits for the lock its writers take,
	// so no sale of the others could stall behind a frozen holder. TestProcessesQueuedFrozen
	// freezes a queued process.
	for _, strategy := range lockedStrategies {
		t.Run(strategy, func(t *testing.T) {
			offered(t, strategy)
			victim := procs[1:2]
			// What a refused late write of the frozen process leaves on its /metrics.
			refused := func() float64 {
				if strategy == "pessimistic" {
					return scrape(t, victim, fmt.Sprintf(`seckill_busy_total{cause="tx_ended",strategy=%q}`, strategy))
				}
				return scrape(t, victim, fmt.Sprintf(`seckill_lock_lost_total{strategy=%q}`, strategy)) +
					scrape(t, victim, fmt.Sprintf(`seckill_fenced_out_total{strategy=%q}`, strategy))
			}
			for try := 1; ; try++ {
				sku := putOnSale(t, procs[0], 1_000_000)
				refusedBefore := refused()
				res, frozen, resumed := sellAcrossFreeze(t, procs, 1, sku, strategy, pause, newLockProbe(t, strategy, sku))
				stall := longestGap(timesOf(t, res.elsewhere, placedAt(t, backendtest.SQL(t), sku)), frozen, resumed)
				late := refused() - refusedBefore
				t.Logf("%s, try %d: one of 3 processes SIGSTOPped for %s, holding the lock: %t (its hold ended while stopped: %t); longest stall of the others %s (their sections' times); %d orders, %v; the frozen process's late writes refused %v times when it woke",
					strategy, try, pause, res.holder != "", res.released, stall.Round(10*time.Millisecond), len(res.acked), res.status, late)
				backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
				assert.Less(t, stall, 3*time.Second, "the others sold again within 3 s")
				if res.holder != "" {
					assert.True(t, res.released, "the frozen process's hold on the lock (%s) outlasted its %s stop", res.holder, pause)
				}
				if res.holder != "" || try == 5 {
					require.NotEmpty(t, res.holder, "the frozen process never held the lock when stopped: the worst case was not exercised")
					return
				}
			}
		})
	}
}

// endOfSale is what the buyers of one sale that froze near its end saw.
type endOfSale struct {
	acked     []stock.Order
	elsewhere []string    // the orders the other processes answered 201
	late      map[int]int // final answers, by status, of the frozen process's buyers in flight when it stopped
	reserved  []string    // the reservations the frozen process held while it was stopped, by id
	unwritten int         // of them, those whose order the database did not have when it woke
	swept     bool        // the frozen process held no reservation any more just before it woke
	stockLeft int64       // the database's stock just before it woke
}

// sellOutAcrossFreeze sells units of sku with hybrid to clients spread over procs
// (sellAcrossStop) until every unit is sold; once a tenth is sold the victim is stopped for
// pause, the moment it is seen with orders in flight, their units reserved in Redis admission.
// Just before it is resumed, it reads the database's stock, whether any reservation is still
// its own, and which of those it held have no order: the database cannot gain one while it is
// stopped, and no sweeper writes orders, so that is what the stop caught.
func sellOutAcrossFreeze(t *testing.T, procs []instance, victim int, sku string, units int, pause time.Duration) (endOfSale, time.Time) {
	t.Helper()
	r, db := backendtest.Redis(t), backendtest.SQL(t)
	var res endOfSale
	s := sellAcrossStop(t, procs, freeze{victim: victim, sku: sku, strategy: "hybrid", pause: pause, at: units / 10,
		on: func(c int) int { return c % len(procs) },
		// Its batches admit, write and settle many orders at once: stop it the moment it is
		// seen holding several reservations of orders the database does not have yet, not just
		// after a settle, nor between a batch's commit and its settle (nothing to return there).
		catch: func(int) bool {
			held := reservations(t, r, sku, procs[victim].pid)
			return len(held) >= 5 && unwritten(t, db, held) > 0
		},
		beforeWake: func(held []string) {
			res.reserved = held
			p, err := backendtest.Store(t).Product(context.Background(), sku)
			require.NoError(t, err)
			res.stockLeft, res.unwritten = p.Stock, unwritten(t, db, res.reserved)
			res.swept = reservedBy(t, r, sku, procs[victim].pid) == 0
		}})
	res.acked, res.elsewhere, res.late = s.acked, s.elsewhere, s.late
	return res, s.frozen
}

// heldWhileStopped watches the reservations of the stopped process pid until the stop ends (it
// is the fault: it lasts, whatever happens meanwhile) and returns every one it saw: those Redis
// admitted after the stop, from commands the process had sent, too. Each lives until a sweeper
// resolves it, past the process's heartbeat, far longer than the watch's 20 ms.
func heldWhileStopped(t *testing.T, r *redis.Client, sku string, pid int, until time.Time) []string {
	t.Helper()
	seen := map[string]bool{}
	for time.Now().Before(until) {
		for _, id := range reservations(t, r, sku, pid) {
			seen[id] = true
		}
		time.Sleep(min(20*time.Millisecond, time.Until(until)))
	}
	return slices.Collect(maps.Keys(seen))
}

// reservedBy counts sku's Redis admission reservations that the process pid holds: of its orders
// in flight, neither settled, given back, swept nor (queued) handed over to the order queue.
func reservedBy(t *testing.T, r *redis.Client, sku string, pid int) int {
	return len(reservations(t, r, sku, pid))
}

// reservations lists the ids of those reservations.
func reservations(t *testing.T, r *redis.Client, sku string, pid int) []string {
	t.Helper()
	held, err := r.HGetAll(context.Background(), "seckill:{"+sku+"}:reserved").Result()
	require.NoError(t, err)
	var ids []string
	for _, h := range held {
		if strings.Contains(h, fmt.Sprintf("/%d#", pid)) { // id|units|instance|key, the instance host/pid#<random>
			id, _, _ := strings.Cut(h, "|")
			ids = append(ids, id)
		}
	}
	return ids
}

// unwritten counts the reservations, by id, whose order the database does not have: placed
// under it (orders.reservation_id), as the sweeper asks.
func unwritten(t *testing.T, db *sql.DB, ids []string) int {
	t.Helper()
	if len(ids) == 0 {
		return 0
	}
	var n int
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	in := strings.Repeat(",?", len(ids))[1:]
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM orders WHERE reservation_id IN ("+in+")", args...).Scan(&n))
	return len(ids) - n
}

// TestProcessesFrozenAtSaleEnd freezes an instance where a flash sale spends its busiest
// seconds: near the end, when the last units the database has are the ones the frozen
// instance's orders in flight reserved in Redis admission. Three hybrid processes sell 300 units
// to 64 clients spread over them; once a tenth is sold, one seen holding reservations of orders
// the database does not have yet is stopped (SIGSTOP) for 8 s — far past its heartbeat's TTL.
// Its reservations must go back to the others while it is stopped (seen in Redis: none left its
// own; with a heartbeat longer than the stop they stay its own), so that they sell every unit
// the database has (none left when it wakes), with no gap between their sales of 3 s or more —
// measured by the times their sections placed the orders (created_at), not by when the starved
// clients heard; when it wakes, the orders whose reservations were returned find the units sold
// and are refused by the version guard (sold_out, never both an order and a refusal), and the
// ledger is exact: nothing held back, no reservation left, admission's counter at the
// database's stock. No buyer hears a 500. Three sales in a row, each try judged; a stop that
// caught no reservation of an order the database did not have (read while it is stopped: what
// the stop caught, not what the sweepers did), or none of its buyers in flight when it woke
// (counted whatever they then heard), did not exercise the case and is sold again, up to five
// times.
func TestProcessesFrozenAtSaleEnd(t *testing.T) {
	procs := startThree(t)
	others := []instance{procs[0], procs[2]}
	returned := func() float64 { return scrape(t, others, `seckill_admission_swept_total{result="returned"}`) }
	const units, pause, rounds, tries = 300, 8 * time.Second, 3, 5
	for round := 1; round <= rounds; round++ {
		for try := 1; ; try++ {
			before := returned()
			sku := putOnSale(t, procs[0], units)
			res, frozen := sellOutAcrossFreeze(t, procs, 1, sku, units, pause)
			swept := returned() - before
			elsewhere := timesOf(t, res.elsewhere, placedAt(t, backendtest.SQL(t), sku))
			last := frozen
			if len(elsewhere) > 0 {
				last = slices.MaxFunc(elsewhere, time.Time.Compare)
			}
			stall := longestGap(elsewhere, frozen, last)
			t.Logf("round %d, try %d: SIGSTOP for %s holding %d reservations, %d of orders not written; %v returned by the others' sweepers, none left its own before it woke: %t; longest gap between the others' sales %s (their sections' times); stock left when it woke %d; its buyers in flight then heard %v; %d orders",
				round, try, pause, len(res.reserved), res.unwritten, swept, res.swept, stall.Round(10*time.Millisecond), res.stockLeft, res.late, len(res.acked))
			require.True(t, res.swept, "the stopped process's reservations were still its own when it woke: no sweeper returned them in %s", pause)
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
			assert.Len(t, res.acked, units, "every unit sold once to a client that heard 201")
			assert.Zero(t, a.Stock)
			assert.Zero(t, res.stockLeft, "the others did not sell the units the stopped process had reserved")
			assert.Less(t, stall, 3*time.Second, "the others sold again within 3 s")
			assert.GreaterOrEqual(t, swept, float64(res.unwritten), "the others' sweepers returned fewer reservations than it held of orders it had not written")
			audit, ok := audited(t, procs[0], sku, 5*time.Second, func(a map[string]any) bool {
				return a["held_back"] == 0.0 && a["redis_reservations"] == 0.0 && a["redis_stock"] == 0.0
			})
			assert.True(t, ok, "the ledger is not exact after the sale: %v", audit)
			for status := range res.late {
				assert.Contains(t, []int{http.StatusCreated, http.StatusConflict}, status, "the stopped process answered %v after it woke", res.late)
			}
			inFlight := 0
			for _, n := range res.late {
				inFlight += n
			}
			if (res.unwritten == 0 || inFlight == 0) && try < tries {
				continue
			}
			require.Positive(t, res.unwritten, "no stop in %d tries caught a reservation of an order not yet written: the case was not exercised", tries)
			require.Positive(t, inFlight, "no stop in %d tries caught a buyer of the stopped process in flight: the case was not exercised", tries)
			assert.Positive(t, res.late[http.StatusConflict], "none of the stopped process's orders in flight, their reservations returned, was refused when it woke")
			break
		}
	}
}

// TestProcessesShutdownUnderLoad sends SIGTERM to one of three processes while it is taking
// orders — until then every order goes to it, and the product's row is held by another
// transaction from just before the signal until the process begins to drain, so that requests
// are in flight there, waiting in its sections, when it is told to stop — and it drains them: every request it had taken when it began to stop (it says
// how many, by its connections busy with one; none, and the drain was not exercised) is
// answered, and it exits cleanly (checked at cleanup). A client cannot count the requests a
// process took: a request sent as the process closes its idle connections, or still in its
// listen queue, is lost without having been taken, and the transport sends one with an
// Idempotency-Key again by itself. Its clients retry on the others with the same key, no
// acknowledged order is lost, and no buyer hears a 500.
func TestProcessesShutdownUnderLoad(t *testing.T) {
	const units, buyers, clients, tries = 100, 300, 48, 3
	for try := 1; ; try++ {
		procs := startThree(t)
		sku := putOnSale(t, procs[0], units)
		db := backendtest.SQL(t)
		var (
			draining    []map[string]any
			signalled   time.Time
			placedFirst = map[string]bool{} // the orders committed before the row was taken
			mu          sync.Mutex
			sold        = map[string]bool{} // the orders whose 201 a client heard
		)
		res := loadHTTP(t, procs, sku, "hybrid", userRange{0, buyers}, clients, httpFault{at: units / 4, only: &procs[1], sold: func(order string) {
			mu.Lock()
			defer mu.Unlock()
			sold[order] = true
		}, inject: func() {
			// The product's row held, as another writer's transaction would hold it, until the
			// process has begun to drain: every order it holds then waits in its section (or
			// behind it), and none is answered between the signal and the drain.
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback() }()
			_, err = tx.ExecContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", sku)
			require.NoError(t, err)
			// Every section that wrote the row has committed, and none can until it is released:
			// the orders committed now are all that will be placed before the drain.
			rows, err := tx.QueryContext(ctx, "SELECT order_id FROM orders WHERE sku = ?", sku)
			require.NoError(t, err)
			for rows.Next() {
				var id string
				require.NoError(t, rows.Scan(&id))
				placedFirst[id] = true
			}
			require.NoError(t, rows.Err())
			_ = rows.Close()
			// Their answers heard first, however late the starved clients read them: the
			// requests the process holds at the signal are then only those that wait on the
			// row, which nothing but a drain answers.
			assert.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				for id := range placedFirst {
					if !sold[id] {
						return false
					}
				}
				return true
			}, 10*time.Second, time.Millisecond, "the orders committed before the row was taken were never answered")
			signalled = time.Now()
			assert.NoError(t, syscall.Kill(procs[1].pid, syscall.SIGTERM))
			assert.Eventually(t, func() bool {
				draining = procs[1].log.said("shutting down: draining in-flight requests")
				return len(draining) > 0
			}, 10*time.Second, time.Millisecond, "the process never said it was draining")
		}})
		require.NotEmpty(t, draining, "the process never said it was draining")
		taken, _ := draining[0]["requests"].(float64)
		// Heard after the signal, by the machine's one clock: the process counts a request in
		// flight until its handler returns, before its answer is sent, so every request it held
		// when it began to drain was answered after the signal, or lost (the answers of the orders
		// committed before the row was taken were heard before it).
		answered := 0
		for _, at := range res.answeredAfterFault {
			if at.After(signalled) {
				answered++
			}
		}
		t.Logf("try %d: hybrid, one of 3 processes sent SIGTERM mid-sale: %v requests in flight there when it began to drain (%d by its clients' count when the row was taken), %d answers heard after the signal; %v; %d requests retried elsewhere after their answer was lost",
			try, taken, res.inFlightAtFault, answered, res.status, res.transportErrors)
		assertSoldThrough(t, res, sku, units, buyers)
		assert.GreaterOrEqual(t, float64(answered), taken, "requests the process had taken lost their answers: it did not drain them")
		if taken == 0 && try < tries {
			continue // none in flight: the drain was not exercised
		}
		require.Positive(t, taken, "in %d tries, no request was in flight when the process began to drain: the drain was not exercised", tries)
		return
	}
}

// scrape sums one sample line of the processes' /metrics.
func scrape(t require.TestingT, procs []instance, sample string) float64 {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	var total float64
	for _, p := range procs {
		resp, err := http.Get(p.url + "/metrics")
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, sample+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				total += f
			}
		}
	}
	return total
}

// httpFault is injected once, when the sale has sold at units. Until then, and until inject
// returns, when only is set every request goes to that process: it dies with requests in flight.
// within bounds the whole sale (0: two minutes), for a fault whose failure leaves buyers retrying.
type httpFault struct {
	at     int
	inject func()
	sold   func(order string) // when set, told every order whose 201 a client heard
	only   *instance
	within time.Duration
}

// httpSale is what the clients of one HTTP sale saw.
type httpSale struct {
	status             map[int]int
	acked              []stock.Order
	busy               int                   // 429s, retried
	unavailable        int                   // 503s, retried
	transportErrors    int                   // requests whose answer was lost, retried elsewhere
	answeredAfterFault []time.Time           // when the faulted process's answers were heard, once the fault began
	inFlightAtFault    int                   // requests sent to the faulted process and not yet answered when the fault came
	latencies          []time.Duration       // of every request answered
	history            []porcupine.Operation // one per buyer: from its first attempt to its final answer
	start, lastSale    time.Time
	end                time.Time
}

// percentile returns the p-th percentile of the request latencies.
func (s httpSale) percentile(p int) time.Duration {
	if len(s.latencies) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(s.latencies))
	return sorted[(len(sorted)-1)*p/100].Round(100 * time.Microsecond)
}

// userRange is the buyers user-<from> ... user-<to-1> of a sale.
type userRange struct{ from, to int }

// loadHTTP has clients concurrent clients buy one unit each for the buyers, round-robin over the
// processes, with the one HTTP buyer: a retry goes to the next process. A 202 (queued) is
// followed until it ends, and counted as 201 once its order is placed.
func loadHTTP(t *testing.T, procs []instance, sku, strategy string, who userRange, clients int, f httpFault) httpSale {
	t.Helper()
	within := f.within
	if within == 0 {
		within = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	b := buyer{t: t, ctx: ctx, client: client, sku: sku, strategy: strategy}
	users := make(chan int)
	go func() {
		defer close(users)
		for i := who.from; i < who.to; i++ {
			users <- i
		}
	}()
	res := httpSale{status: map[int]int{}, start: time.Now()}
	var mu sync.Mutex
	var wg, injected sync.WaitGroup
	var faulting, faulted atomic.Bool          // the fault begins; it is done
	var inFlight, inFlightAtFault atomic.Int64 // requests to f.only not yet answered: now, and when the fault came
	for range clients {
		wg.Go(func() {
			for i := range users {
				user := fmt.Sprintf("user-%04d", i)
				op := porcupine.Operation{ClientId: i, Input: 1, Call: time.Now().UnixNano()}
				var (
					sent      time.Time
					toFaulted bool
				)
				to := func(attempt int) instance {
					target := procs[(i+attempt)%len(procs)]
					if f.only != nil && !faulted.Load() {
						target = *f.only
					}
					sent, toFaulted = time.Now(), f.only != nil && target.pid == f.only.pid
					if toFaulted {
						inFlight.Add(1)
					}
					return target
				}
				heard := func(_ instance, a answer, err error) {
					if toFaulted {
						inFlight.Add(-1)
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil: // the answer was lost (the process died): retried on the next process
						res.transportErrors++
						return
					case toFaulted && faulting.Load():
						res.answeredAfterFault = append(res.answeredAfterFault, time.Now())
					case a.status == http.StatusTooManyRequests:
						res.busy++
					case a.status == http.StatusServiceUnavailable:
						res.unavailable++
					}
					res.latencies = append(res.latencies, time.Since(sent))
				}
				a, target, ok := b.buy(user, to, heard)
				if !ok {
					return
				}
				if a.status == http.StatusAccepted {
					// Queued: a sale once placed. A 202 that ends rejected stays counted as
					// 202 — with no fault the database has every unit admission accepted, so
					// the sale's statuses show it.
					o, err := followQueued(ctx, client, target.url, a.order.OrderID)
					if err != nil {
						t.Errorf("%s: accepted (202), never ended: %v", user, err)
						return
					}
					if placed(o) {
						a.status = http.StatusCreated
					}
				}
				mu.Lock()
				res.status[a.status]++
				op.Return, op.Output = time.Now().UnixNano(), map[int]string{http.StatusCreated: "ok", http.StatusConflict: "sold_out"}[a.status]
				res.history = append(res.history, op)
				if a.status == http.StatusCreated {
					res.acked = append(res.acked, a.order)
					if f.sold != nil {
						f.sold(a.order.OrderID)
					}
					res.lastSale = time.Now()
					if f.inject != nil && len(res.acked) == f.at {
						injected.Go(func() {
							inFlightAtFault.Store(inFlight.Load())
							faulting.Store(true)
							f.inject()
							faulted.Store(true)
						})
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	injected.Wait()
	res.end, res.inFlightAtFault = time.Now(), int(inFlightAtFault.Load())
	return res
}

// lockedStrategies are the safe strategies that place an order inside its request, under a lock
// (or the product's row lock), and answer 201.
var lockedStrategies = []string{"hybrid", "etcd", "zookeeper", "pessimistic", "dblock"}

// safeStrategies are the strategies that must never oversell: the locked ones, and queued, which
// answers 202 and places the order later — the tests follow each 202 until it ends
// (followQueued), and count it as a sale only once it is placed.
var safeStrategies = append(slices.Clone(lockedStrategies), "queued")

// followQueued follows an order answered 202 — GET /api/v1/orders/{id}?wait=5s on url, again
// while it is queued or the answer is lost — until it ends, and returns it: placed (pending or
// confirmed) or rejected. Every 202 must end: an error when ctx ends first.
func followQueued(ctx context.Context, client *http.Client, url, id string) (contract.Order, error) {
	for {
		var o contract.Order
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/orders/"+id+"?wait=5s", nil)
		if err != nil {
			return o, err
		}
		resp, err := client.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&o)
			_ = resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && o.Status != contract.StatusQueued {
				return o, nil
			}
		}
		if ctx.Err() != nil {
			return o, fmt.Errorf("order %s still %q: %w (last error: %v)", id, o.Status, ctx.Err(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// placed reports whether a queued order ended as an active order row.
func placed(o contract.Order) bool { return o.Status == "pending" || o.Status == "confirmed" }

// TestProcessesRetriesInFlight sends the same request — one Idempotency-Key, one body — 20 times
// at once over three processes, under every strategy, as a client whose first attempt timed out
// might: each repeat either waits for the original or hears 429 busy and retries (queued: or
// hears 202 with the original while it is queued). In the end all 20 hold the one order, and the
// database has one row. The processes' own counts (seckill_orders_total) must say the same: one
// order placed, 19 answers that are the original replayed, and never already_purchased, nor
// a 500; every 429 a client heard is a busy answer the processes counted; under hybrid and
// queued, admission met the original in flight (seckill_admission_total{result="in_flight"}).
func TestProcessesRetriesInFlight(t *testing.T) {
	procs := startThree(t)
	for _, strategy := range safeStrategies {
		t.Run(strategy, func(t *testing.T) {
			offered(t, strategy)
			// Under hybrid and queued, admission sees a repeat meet its original in flight (the
			// key's reservation held, its order not written); the locked strategies only queue
			// repeats behind it. On a starved machine the original can be written before any
			// repeat reaches admission: the round is then sold again, each round judged whole.
			for round := 1; ; round++ {
				inFlight := retriesRound(t, procs, strategy)
				if (strategy != "hybrid" && strategy != "queued") || inFlight > 0 {
					return
				}
				require.Less(t, round, 3, "no repeat met the original in flight in three rounds")
			}
		})
	}
}

// retriesRound is one round of TestProcessesRetriesInFlight on a product of its own; it returns
// how many times admission met the original in flight.
func retriesRound(t *testing.T, procs []instance, strategy string) float64 {
	sku := putOnSale(t, procs[0], 5)
	outcomes := func() map[string]float64 {
		counts := map[string]float64{}
		for _, o := range []string{"ok", "replayed", "busy", "already_purchased", "internal"} {
			counts[o] = scrape(t, procs, fmt.Sprintf(`seckill_orders_total{outcome=%q,strategy=%q}`, o, strategy))
		}
		counts["in_flight"] = scrape(t, procs, `seckill_admission_total{result="in_flight"}`)
		return counts
	}
	before := outcomes()
	const repeats = 20
	r := repeatAtOnce(t, procs, sku, strategy, repeats)
	queued, statuses := r.statuses[http.StatusAccepted], r.placed()
	after := outcomes()
	counted := map[string]float64{}
	for o := range after {
		counted[o] = after[o] - before[o]
	}
	t.Logf("%s: 20 identical requests over 3 processes: statuses %v (%d of them 202, queued), %d busy answers retried; the processes counted %v",
		strategy, statuses, queued, r.busy, counted)
	assert.Equal(t, map[int]int{http.StatusCreated: repeats}, statuses, "every repeat answered 201 (queued: or 202)")
	assert.Equal(t, 1.0, counted["ok"], "the processes placed one order")
	assert.Equal(t, float64(repeats-1), counted["replayed"], "every repeat was answered with the original, replayed")
	assert.Equal(t, float64(r.busy), counted["busy"], "every 429 a client heard is a busy answer of a process")
	assert.Zero(t, counted["already_purchased"], "a repeat heard already_purchased")
	r.heldOnce(t, procs[0], backendtest.Store(t), sku, strategy)
	return counted["in_flight"]
}

// placed is the repeats' final answers with queued's 202s — the original, answered while it
// waits — counted as the 201s they become once it is placed.
func (r repeated) placed() map[int]int {
	statuses := maps.Clone(r.statuses)
	if n := statuses[http.StatusAccepted]; n > 0 {
		statuses[http.StatusCreated] += n
		delete(statuses, http.StatusAccepted)
	}
	return statuses
}

// heldOnce requires that the repeats named one order, user u-1's, and that store holds it with
// the invariant; under queued the order is followed on proc until it ends, and must end placed.
func (r repeated) heldOnce(t *testing.T, proc instance, store *stock.Store, sku, strategy string) {
	t.Helper()
	require.Len(t, r.orders, 1, "one order_id for all of them: %v", r.orders)
	for id := range r.orders {
		if strategy == "queued" {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, err := followQueued(ctx, &http.Client{Timeout: 30 * time.Second}, proc.url, id)
			require.NoError(t, err)
			require.True(t, placed(o), "the queued order ended %s (%s)", o.Status, o.Reason)
		}
		backendtest.RequireInvariant(t, store, sku, []stock.Order{{OrderID: id, UserID: "u-1"}})
	}
}

// TestProcessesHybridKill SIGKILLs one of three hybrid processes in the middle of a sale, while
// it holds Redis reservations of orders it had not written yet — the classic flash-sale bug:
// Redis deducted, the process died before the database. Its clients retry elsewhere with the
// same Idempotency-Key (answered busy while the dead reservation is in flight). The units of the
// dead reservations come back on sale by themselves: the others' sweepers return them (the
// ledger shows none held back, no reservation left) within 3 s of the kill, by the times the
// sweepers logged the return; new buyers buy every unit left; the history of every buyer is
// checked against one product's stock. No buyer hears a 500.
func TestProcessesHybridKill(t *testing.T) {
	hybridKill(t, func(t *testing.T) []instance { return startThree(t) }, backendtest.Store(t), backendtest.SQL(t))
}

// hybridKill is TestProcessesHybridKill on the processes start starts, judged on store and db; it
// returns the product it sold.
func hybridKill(t *testing.T, start func(t *testing.T) []instance, store *stock.Store, db *sql.DB) string {
	const units, first, clients, tries = 300, 150, 48, 3
	var (
		procs []instance
		sku   string
		res   httpSale
	)
	// Until the kill, all orders go to the process that dies, so that it has reservations in
	// flight when it does: it is killed the moment Redis is seen holding one. Not at once: the
	// answer that triggers the fault comes from a section that has just settled its batch, and
	// its clients' next orders are not yet admitted. A kill that left no reservation of an order
	// it had not written (what it left is read at the kill, and the database decides, as the
	// sweeper asks: nothing the sweepers do changes either) strands nothing for the sweep to
	// return, tests nothing, and is sold again; every sale is judged.
	r := backendtest.Redis(t)
	for try := 1; ; try++ {
		procs = start(t)
		sku = putOnSale(t, procs[0], units)
		var (
			killed time.Time
			left   []string
		)
		// Ten seconds for 150 buyers, a sale of about three with the units back within 3 s of the
		// kill: units that never come back (no sweep) leave some asking again until the deadline.
		res = loadHTTP(t, procs, sku, "hybrid", userRange{0, first}, clients, httpFault{at: first / 3, only: &procs[1], within: 10 * time.Second, inject: func() {
			for until := time.Now().Add(2 * time.Second); time.Now().Before(until) && reservedBy(t, r, sku, procs[1].pid) == 0; {
			}
			killed = time.Now()
			procs[1].kill()
			left = reservations(t, r, sku, procs[1].pid)
		}})
		stranded := unwritten(t, db, left)
		t.Logf("hybrid, one of 3 processes SIGKILLed mid-sale (sale %d): %v, %d busy answers retried, %d requests lost with the process and retried elsewhere, %d reservations left by it, %d of orders it had not written",
			try, res.status, res.busy, res.transportErrors, len(left), stranded)
		assert.Equal(t, map[int]int{http.StatusCreated: first}, res.status, "every buyer of the first wave has its order")
		assert.Zero(t, res.unavailable, "buyers heard 503")
		backendtest.RequireInvariant(t, store, sku, res.acked)

		audit, ok := audited(t, procs[0], sku, 10*time.Second, func(a map[string]any) bool {
			return a["held_back"] == 0.0 && a["redis_reservations"] == 0.0
		})
		require.True(t, ok, "units held back by dead reservations never came back: %v", audit)
		var returns []time.Time
		for _, p := range []instance{procs[0], procs[2]} {
			returns = append(returns, p.log.at(t, "reservations without an order returned to sale", sku)...)
		}
		if stranded > 0 {
			require.NotEmpty(t, returns, "no sweeper logged a return of the %d units the dead process held: %v", stranded, audit)
		}
		if len(returns) > 0 {
			back := slices.MaxFunc(returns, time.Time.Compare).Sub(killed)
			t.Logf("every unit the database had was on sale again %s after the kill (the last return the sweepers logged, %d in all)", back.Round(10*time.Millisecond), len(returns))
			assert.Less(t, back, 3*time.Second, "the stated bound (README, No stranded stock)")
		}
		if stranded > 0 {
			break
		}
		require.Less(t, try, tries, "the killed process left no reservation of an order it had not written in %d sales: the sweep was never put to the test", tries)
	}

	rest := loadHTTP(t, procs[:1], sku, "hybrid", userRange{first, first + 2*units}, clients, httpFault{})
	assert.Equal(t, map[int]int{http.StatusCreated: units - first, http.StatusConflict: units + first}, rest.status,
		"new buyers bought every unit left")
	assert.Zero(t, rest.unavailable, "buyers heard 503")
	all := append(res.acked, rest.acked...)
	a := backendtest.RequireInvariant(t, store, sku, all)
	assert.Zero(t, a.Stock, "nothing stranded")
	backendtest.AssertLinearizable(t, units, append(res.history, rest.history...))
	return sku
}

// audited reads sku's audit on p until done says so of it or within passes, on the test's own
// goroutine (a failed call may stop the test there, as it may not from Eventually's), and
// returns the last audit read and whether done said so.
func audited(t *testing.T, p instance, sku string, within time.Duration, done func(audit map[string]any) bool) (map[string]any, bool) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		var audit map[string]any
		ok := p.call(t, http.MethodGet, "/api/v1/products/"+sku+"/audit", "", &audit) == http.StatusOK && done(audit)
		if ok || time.Now().After(deadline) {
			return audit, ok
		}
	}
}

// postJSON sends one POST without credentials and returns the status and the decoded body.
func postJSON(t *testing.T, client *http.Client, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// placeJSON places one order as postJSON does. A queued order (202) is followed until it ends:
// once placed it is answered 201, with the order as it stands then.
func placeJSON(t *testing.T, client *http.Client, url, sku, body string) (int, map[string]any) {
	t.Helper()
	status, o := postJSON(t, client, url+"/api/v1/products/"+sku+"/orders", body)
	if status != http.StatusAccepted {
		return status, o
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended, err := followQueued(ctx, client, url, o["order_id"].(string))
	require.NoError(t, err, "every 202 ends")
	if !placed(ended) {
		return status, o
	}
	resp, err := client.Get(url + "/api/v1/orders/" + ended.OrderID)
	require.NoError(t, err)
	defer resp.Body.Close()
	o = nil
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&o))
	return http.StatusCreated, o
}

// TestProcessesLifecycleRaces races the order's transitions across three processes, under every
// strategy, each race released together by close(start): three cancels of one order (all 200,
// the unit back once); cancels against the expiry, at the deadline (each either cancels it or
// hears order_expired); payments against the expiry (each either confirms it or hears
// order_expired — and a payment after the expiry is refused). Whatever won, every answer agrees
// with the order's final state, and the stock holds exactly the units of the orders that are
// not active.
func TestProcessesLifecycleRaces(t *testing.T) {
	procs := startThree(t)
	client := &http.Client{Timeout: 30 * time.Second}
	const perRace = 8
	for _, strategy := range safeStrategies {
		t.Run(strategy, func(t *testing.T) {
			offered(t, strategy)
			sku := backendtest.SKU(t)
			require.Equal(t, http.StatusOK, procs[0].call(t, "PUT", "/api/v1/products/"+sku,
				fmt.Sprintf(`{"name":%q,"stock":%d,"payment_timeout_s":2}`, t.Name(), 3*perRace), nil))
			type placed struct {
				id, user string
				expires  time.Time
			}
			var orders []placed
			for i := range 3 * perRace {
				user := fmt.Sprintf("u-%02d", i)
				status, o := placeJSON(t, client, procs[i%3].url, sku, fmt.Sprintf(`{"user_id":%q,"strategy":%q}`, user, strategy))
				require.Equal(t, http.StatusCreated, status, "%v", o)
				require.Equal(t, "pending", o["status"])
				expires, err := time.Parse(time.RFC3339Nano, o["expires_at"].(string))
				require.NoError(t, err)
				orders = append(orders, placed{o["order_id"].(string), user, expires})
			}
			// answers[i] are the answers to the racing requests on order i.
			answers := make([][]int, len(orders))
			race := func(from, to int, action string, at time.Time) {
				var wg sync.WaitGroup
				var mu sync.Mutex
				start := make(chan struct{})
				for i := from; i < to; i++ {
					for p := range procs {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							status, body := postJSON(t, client, procs[p].url+"/api/v1/orders/"+orders[i].id+"/"+action, fmt.Sprintf(`{"user_id":%q}`, orders[i].user))
							assert.Contains(t, []int{http.StatusOK, http.StatusConflict}, status, "%s %s: %v", action, orders[i].id, body)
							mu.Lock()
							answers[i] = append(answers[i], status)
							mu.Unlock()
						}()
					}
				}
				time.Sleep(time.Until(at)) // the race is at the deadline: the moment it is about, by the clock
				close(start)
				wg.Wait()
			}
			race(0, perRace, "cancel", time.Now())
			deadline := orders[perRace].expires
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); race(perRace, 2*perRace, "cancel", deadline.Add(-5*time.Millisecond)) }()
			go func() { defer wg.Done(); race(2*perRace, 3*perRace, "pay", deadline.Add(-5*time.Millisecond)) }()
			wg.Wait()
			// Each order ends: decided by its racers, or past its deadline (it reads expired).
			finals := make([]string, len(orders))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				for i, o := range orders {
					var got map[string]any
					require.Equal(c, http.StatusOK, procs[i%3].call(c, "GET", "/api/v1/orders/"+o.id, "", &got))
					finals[i] = got["status"].(string)
					require.NotEqual(c, "pending", finals[i], "order %d", i)
				}
			}, 10*time.Second, 50*time.Millisecond, "an order is still pending past its deadline")

			var acked []stock.Order
			outcomes := map[string]int{}
			for i, o := range orders {
				final := finals[i]
				outcomes[final]++
				won := slices.Contains(answers[i], http.StatusOK)
				switch {
				case i < perRace:
					assert.Equal(t, "cancelled", final)
					assert.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusOK}, answers[i], "every cancel of a cancelled order is 200")
				case i < 2*perRace:
					assert.Equal(t, won, final == "cancelled", "order %d: answers %v, final %s", i, answers[i], final)
					assert.Contains(t, []string{"cancelled", "expired"}, final)
				default:
					assert.Equal(t, won, final == "confirmed", "order %d: answers %v, final %s", i, answers[i], final)
					assert.Contains(t, []string{"confirmed", "expired"}, final)
					if final == "confirmed" {
						acked = append(acked, stock.Order{OrderID: o.id, UserID: o.user})
					} else {
						status, body := postJSON(t, client, procs[0].url+"/api/v1/orders/"+o.id+"/pay", fmt.Sprintf(`{"user_id":%q}`, o.user))
						assert.Equal(t, http.StatusConflict, status, "a payment after the expiry is refused: %v", body)
					}
				}
			}
			t.Logf("%s: final states %v", strategy, outcomes)
			a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, acked)
			assert.EqualValues(t, 3*perRace-len(acked), a.Stock, "every unit of an ended order back, once")
		})
	}
}

// TestProcessesRedisModes runs the default strategy across three service processes configured
// as users configure them — SECKILL_REDIS_MODE cluster over a six-node Redis Cluster's seed
// nodes, and sentinel over three Sentinels with SECKILL_REDIS_MASTER — over HTTP: each process
// is ready (its readiness names the mode's Redis), and the sale sells exactly its stock.
func TestProcessesRedisModes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and runs three processes; skipped with -short")
	}
	for _, mode := range []string{"cluster", "sentinel"} {
		t.Run(mode, func(t *testing.T) {
			env := []string{"SECKILL_REDIS_MODE=" + mode}
			if mode == "cluster" {
				env = append(env, "SECKILL_REDIS_ADDRS="+strings.Join(backendtest.StartRedisCluster(t).Addrs(), ","))
			} else {
				s := backendtest.StartRedisSentinel(t)
				env = append(env, "SECKILL_REDIS_ADDRS="+strings.Join(s.SentinelAddrs(), ","), "SECKILL_REDIS_MASTER="+s.Name)
			}
			procs := startThree(t, env...)
			for _, p := range procs {
				var ready map[string]any
				require.Equal(t, http.StatusOK, p.call(t, "GET", "/readyz", "", &ready), "readiness: %v", ready)
				assert.Contains(t, fmt.Sprint(ready), "redis "+mode)
			}
			const units, buyers, clients = 50, 150, 24
			sku := putOnSale(t, procs[0], units)
			res := loadHTTP(t, procs, sku, "hybrid", userRange{0, buyers}, clients, httpFault{})
			assert.Zero(t, res.transportErrors)
			assertSoldThrough(t, res, sku, units, buyers)
			assert.Zero(t, scrape(t, procs, "seckill_redis_fallbacks_total"), "Redis admitted every order")
		})
	}
}
