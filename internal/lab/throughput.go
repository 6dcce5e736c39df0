package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/redisserver"
	"github.com/flashsale/seckill/internal/stock"
)

// throughput puts the sources' performance rows (docs/sources.md) to the test: how many
// acquire+release pairs a second each lock family does, measured here rather than quoted. Every
// figure is a loop of N clients, each taking the lock and releasing it at once for a fixed time, on
// one shared key (the clients queue or poll for it) and on a key per client (no contention: the
// lock's own cost). It is a measurement, not a failure beside its fix: each claim of the tables is
// held against the figures on its own, and comes out held or contradicted here.
func throughput() Experiment {
	return Experiment{
		Name: "throughput",
		Seed: "«Choosing a lock» and «Locks in practice», their comparison tables (性能, performance)",
		Claim: "A Redis lock does 10万+ (100,000+) acquisitions a second («Locks in practice»; «Choosing a lock»: 万级 to 十万级, tens to hundreds of thousands), ZooKeeper's 1-5万 (10,000-50,000; «Choosing a lock»: ZooKeeper/etcd 千级, thousands), " +
			"MySQL's under 1000 («Locks in practice»; «Choosing a lock»: 千级, thousands): Redis first, the database last.",
		Fix:      "pairs / elapsed of N clients looping lock -> unlock, per lock, at 1, 8 and 64 clients, on one key and a key per client",
		Measures: true,
		Run:      runThroughput,
	}
}

// A lockCycle is one client of a lock: it takes the lock on key, waiting for it at most about
// bound, and releases it at once. false is a wait that ran out — contention, counted — and an
// error is a lock that broke.
type lockCycle func(ctx context.Context, key string, bound time.Duration) (bool, error)

// lockFamily is one lock of the tables, opened for up to n clients.
type lockFamily struct {
	slug, name string
	// open makes n clients; each has its own session where the lock ties ownership to one
	// (etcd, ZooKeeper). close ends what open made.
	open func(ctx context.Context, n int) (clients []lockCycle, close func(), err error)
}

// throughputCell is one measured figure: a family, a number of clients, one key or many.
type throughputCell struct {
	clients          int
	shared           bool
	pairs, timeouts  int
	elapsed          time.Duration
	rate             float64 // pairs a second
	measured, single bool    // single: one client, whose one key is the shared key too
}

// pollEvery is how often a lock without a queue of its own (Redis SET NX, the lock table) tries
// again while another client holds it. redsync's default, a random 50-250 ms, would measure its
// sleep, not the lock; 2 ms keeps a freed lock from idling while the backend still answers.
const pollEvery = 2 * time.Millisecond

// throughputTTL is the expiry of the locks that have one: far longer than a cycle, so that no
// lock expires under its holder and every release is a real one.
const throughputTTL = 2 * time.Second

func runThroughput(ctx context.Context, env *Env) (Result, error) {
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	if env.Store.Dialect() != stock.MySQL {
		return Result{}, &NotRun{Why: "the tables' database lock is MySQL's; the store is " + string(env.Store.Dialect())}
	}
	if err := redisserver.Available(); err != nil {
		return Result{}, &NotRun{Why: err.Error()}
	}
	clientCounts := pick(env.Size, []int{1, 8}, []int{1, 8, 64})
	most := clientCounts[len(clientCounts)-1]
	cellTime := pick(env.Size, 200*time.Millisecond, 1500*time.Millisecond)
	// Long enough that no lock's own round trips outrun it on a loaded machine (ZooKeeper's
	// fsynced writes under -race take hundreds of ms), so that a wait that runs out is a wait
	// for another client.
	bound := time.Second

	dir, err := os.MkdirTemp("", "seckill-throughput-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	// etcd and ZooKeeper start while the rest is set up, and are waited for before anything is
	// measured: ZooKeeper's JVM starting takes both cores for seconds, and would slow whatever
	// ran beside it. Waited for once, by the measurement or by the cleanup.
	started := startServices(dir)
	defer started.stop()

	nodes, err := redisserver.Start(dir, 5)
	if err != nil {
		return Result{}, err
	}
	defer redisserver.Kill(nodes...)
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, s := range nodes {
		// A connection for every client, as that many processes would have: go-redis's default
		// pool (10 a CPU) would make the 64 clients queue for a connection, not for the lock.
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: most})
		defer c.Close()
		pools[i] = goredis.NewPool(c)
	}

	key := func(slug, which string) string { return env.key("throughput", slug+"-"+which) }
	skus := []string{key("row", "one")}
	for i := range most {
		skus = append(skus, key("row", fmt.Sprint(i)))
	}
	defer func() { deleteProducts(ctx, env, skus) }()
	for _, sku := range skus {
		if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "a row to lock", Stock: 1, MaxPerOrder: 1}); err != nil {
			return Result{}, err
		}
	}

	e := started.etcd()
	if e.err != nil {
		return Result{}, fmt.Errorf("embedded etcd: %w", e.err)
	}
	zkServers, zkNotRun := started.zooKeeper()
	families := []lockFamily{
		redsyncFamily("redis", "one Redis (redsync)", pools[:1]),
		redsyncFamily("redlock3", "Redlock, 3 nodes", pools[:3]),
		redsyncFamily("redlock5", "Redlock, 5 nodes", pools),
		lockTableFamily(env),
		rowLockFamily(env),
		etcdFamily(e.member),
	}
	if zkNotRun == nil {
		families = append(families, zkFamily(env, zkServers))
	}

	table := make(map[string][]throughputCell, len(families))
	for _, f := range families {
		cells, err := measureFamily(ctx, f, clientCounts, key, cellTime, bound)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", f.name, err)
		}
		table[f.slug] = cells
	}
	res := judgeThroughput(families, table, clientCounts, cellTime, bound)
	if zkNotRun != nil {
		res.NotRun = append(res.NotRun, *zkNotRun)
	}
	return res, nil
}

// warmCycles is how many pairs each client does on its own key before the cells: the first
// ones pay for what is made once (a ZooKeeper directory, a connection, the JIT's first pass).
const warmCycles = 3

// measureFamily opens f for the most clients and measures every cell. One client has one key
// either way, so it is measured once and stands for both.
func measureFamily(ctx context.Context, f lockFamily, clientCounts []int, key func(slug, which string) string, cellTime, bound time.Duration) ([]throughputCell, error) {
	clients, closeAll, err := f.open(ctx, clientCounts[len(clientCounts)-1])
	if err != nil {
		return nil, err
	}
	defer closeAll()
	warmErrs := make([]error, len(clients))
	var warm sync.WaitGroup
	for i, cycle := range clients {
		warm.Go(func() {
			for range warmCycles {
				if _, warmErrs[i] = cycle(ctx, key(f.slug, fmt.Sprint(i)), bound); warmErrs[i] != nil {
					return
				}
			}
		})
	}
	warm.Wait()
	if err := errors.Join(warmErrs...); err != nil {
		return nil, err
	}
	var cells []throughputCell
	for _, n := range clientCounts {
		for _, shared := range []bool{false, true} {
			if n == 1 && shared {
				c := cells[len(cells)-1]
				c.shared = true
				cells = append(cells, c)
				continue
			}
			keyOf := func(i int) string { return key(f.slug, fmt.Sprint(i)) }
			if shared {
				keyOf = func(int) string { return key(f.slug, "one") }
			}
			c, err := measureCell(ctx, clients[:n], keyOf, cellTime, bound)
			if err != nil {
				return nil, err
			}
			c.shared, c.single = shared, n == 1
			cells = append(cells, c)
		}
	}
	return cells, nil
}

// maxCycles bounds a client's loop by count as well as by time, so that a lock that answers
// without doing anything (a broken one) cannot spin a core for the whole cell.
const maxCycles = 1_000_000

// measureCell releases the clients together and lets each loop lock -> unlock on its key for
// cellTime. The rate is the completed pairs over the time until the last client stopped —
// including the wait of a client that was queued when the time ran out.
func measureCell(ctx context.Context, clients []lockCycle, keyOf func(int) string, cellTime, bound time.Duration) (throughputCell, error) {
	pairs := make([]int, len(clients))
	timeouts := make([]int, len(clients))
	errs := make([]error, len(clients))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, cycle := range clients {
		wg.Go(func() {
			<-start
			deadline := time.Now().Add(cellTime)
			for n := 0; n < maxCycles && time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				ok, err := cycle(ctx, keyOf(i), bound)
				if err != nil {
					errs[i] = err
					return
				}
				if ok {
					pairs[i]++
				} else {
					timeouts[i]++
				}
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	c := throughputCell{clients: len(clients), elapsed: time.Since(began), measured: true}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return c, err
	}
	for i := range clients {
		c.pairs += pairs[i]
		c.timeouts += timeouts[i]
	}
	c.rate = float64(c.pairs) / c.elapsed.Seconds()
	return c, nil
}

// redsyncFamily is redsync on pools: one pool is a single Redis, several are Redlock. A Mutex is
// made per acquisition (it is not safe to share).
func redsyncFamily(slug, name string, pools []redsyncredis.Pool) lockFamily {
	rs := redsync.New(pools...)
	cycle := func(ctx context.Context, key string, bound time.Duration) (bool, error) {
		// The wait is bounded by tries, not by a deadline: redsync releases a failed try with
		// the caller's context, and a deadline that fell during the try would leave the key set
		// on the nodes that granted it until it expired, stalling every client of the key.
		m := rs.NewMutex(key, redsync.WithExpiry(throughputTTL), redsync.WithTries(int(bound/pollEvery)+1),
			redsync.WithRetryDelay(pollEvery))
		err := m.LockContext(context.WithoutCancel(ctx))
		var taken *redsync.ErrTaken
		switch {
		case errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken):
			return false, nil
		case err != nil:
			return false, err
		}
		ok, err := m.UnlockContext(context.WithoutCancel(ctx))
		if err == nil && !ok {
			err = fmt.Errorf("unlock %s: not held on a majority", key)
		}
		return true, err
	}
	return lockFamily{slug: slug, name: name, open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		return repeat(cycle, n), func() {}, nil
	}}
}

// lockTableFamily is the lock table: poll with a plain read while the lock is taken, try the
// INSERT when it looks free (LockTaken says why: failed INSERTs lock the row the holder's
// DELETE needs), delete the row to release.
func lockTableFamily(env *Env) lockFamily {
	return lockFamily{slug: "table", name: "DB lock table", open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		clients := make([]lockCycle, n)
		for i := range clients {
			holder := fmt.Sprintf("client-%d", i)
			clients[i] = func(ctx context.Context, key string, bound time.Duration) (bool, error) {
				// No deadline on the statements, as for redsync: an INSERT cut short by one may
				// still have taken the lock, which would then hold the key for its TTL.
				ctx = context.WithoutCancel(ctx)
				_, ok, err := waitFor(ctx, bound, pollEvery, func() (bool, error) {
					taken, err := env.Store.LockTaken(ctx, key)
					if err != nil || taken {
						return false, err
					}
					return env.Store.TryLock(ctx, key, holder, throughputTTL)
				})
				if errors.Is(err, stock.ErrBusy) { // a deadlock between pollers: the wait failed
					return false, nil
				}
				if err != nil || !ok {
					return false, err
				}
				released, err := env.Store.Unlock(ctx, key, holder)
				if err == nil && !released {
					err = fmt.Errorf("unlock %s: not held", key)
				}
				return true, err
			}
		}
		return clients, func() {}, nil
	}}
}

// rowLockFamily is SELECT ... FOR UPDATE and COMMIT on a product row, on the store's main pool.
// The key is the product's SKU: measureFamily's keys are the products runThroughput made.
func rowLockFamily(env *Env) lockFamily {
	cycle := func(ctx context.Context, sku string, bound time.Duration) (bool, error) {
		// A deadline is safe here: a query it cuts short closes its connection, and the server
		// rolls the transaction back, releasing the row.
		wctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		err := env.Store.LockRow(wctx, sku)
		if err != nil && (wctx.Err() != nil || errors.Is(err, stock.ErrBusy)) {
			return false, nil
		}
		return err == nil, err
	}
	return lockFamily{slug: "row", name: "SELECT ... FOR UPDATE", open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		return repeat(cycle, n), func() {}, nil
	}}
}

// etcdFamily is etcdlock.Mutex with a session per client: two mutexes on one session do not exclude
// each other, so a shared session would measure no lock at all.
func etcdFamily(m *etcdserver.Member) lockFamily {
	return lockFamily{slug: "etcd", name: "etcd (etcdlock.Mutex)", open: func(ctx context.Context, n int) ([]lockCycle, func(), error) {
		client, err := etcdlock.NewClient(etcdserver.Endpoints(m))
		if err != nil {
			return nil, nil, err
		}
		var sessions []*concurrency.Session
		closeAll := func() {
			for _, s := range sessions {
				_ = s.Close()
			}
			_ = client.Close()
		}
		clients := make([]lockCycle, n)
		for i := range clients {
			s, err := concurrency.NewSession(client, concurrency.WithTTL(10), concurrency.WithContext(ctx))
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("etcd session: %w", err)
			}
			sessions = append(sessions, s)
			clients[i] = func(ctx context.Context, key string, bound time.Duration) (bool, error) {
				// A deadline is safe: Lock removes its key when it gives up.
				wctx, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				m := etcdlock.New(s, "/seckill-lab/"+key)
				if err := m.Lock(wctx); err != nil {
					if wctx.Err() != nil {
						return false, nil
					}
					return false, err
				}
				return true, m.Unlock(context.WithoutCancel(ctx))
			}
		}
		return clients, closeAll, nil
	}}
}

// zkFamily is zklock.Mutex with a connection, so a session, per client, as that many processes would
// have — up to zkConns of them, which the clients beyond share. Sharing is safe (each handle has
// its own node, so two on one session still exclude each other), but not needed below 50.
func zkFamily(env *Env, servers []*zkserver.Server) lockFamily {
	return lockFamily{slug: "zk", name: "ZooKeeper (zklock.Mutex)", open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		var conns []*zk.Conn // the first min(n, zkConns); client i uses conns[i % zkConns]
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		clients := make([]lockCycle, n)
		for i := range clients {
			if i < zkConns {
				conn, err := zklock.Dial(zkserver.Addrs(servers...), 4*time.Second, env.Log)
				if err != nil {
					closeAll()
					return nil, nil, err
				}
				conns = append(conns, conn)
			}
			conn := conns[i%zkConns]
			clients[i] = func(ctx context.Context, key string, bound time.Duration) (bool, error) {
				// A deadline is safe: a waiter that gives up deletes its node, or its orphan.
				wctx, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				m := zklock.New(conn, "/seckill-lab/"+strings.ReplaceAll(key, ":", "-"))
				if err := m.Lock(wctx); err != nil {
					if wctx.Err() != nil {
						return false, nil
					}
					return false, err
				}
				released, err := m.Unlock(context.WithoutCancel(ctx))
				if err == nil && !released {
					err = fmt.Errorf("unlock %s: its node was gone", key)
				}
				return true, err
			}
		}
		return clients, closeAll, nil
	}}
}

// zkConns is the most connections zkFamily opens: ZooKeeper refuses more than 60 from one
// address (maxClientCnxns), and the 64 clients' connections would be cut, not measured.
const zkConns = 50

// repeat is n clients of one cycle, for the locks whose clients share a connection pool.
func repeat(cycle lockCycle, n int) []lockCycle {
	clients := make([]lockCycle, n)
	for i := range clients {
		clients[i] = cycle
	}
	return clients
}

// throughputClaim is one cell of the sources' tables: a range of pairs a second, for the
// families it names. high 0: no upper end.
type throughputClaim struct {
	says      string
	families  []string
	low, high float64
}

// holds reports whether rate is in the claim's range.
func (c throughputClaim) holds(rate float64) bool {
	return rate >= c.low && (c.high == 0 || rate < c.high)
}

// throughputClaims are the tables' performance rows. 千级 is read as 1,000-9,999 a second, 万级 as
// 10,000-99,999 and 十万级 as 100,000-999,999. The two tables do not agree («Locks in practice» has
// MySQL under 1000, «Choosing a lock» the database at 千级), so no figure can bear out every claim:
// each is a judgement of its own.
var throughputClaims = []throughputClaim{
	{"«Locks in practice»: Redis (Redisson) 10万+/s", []string{"redis"}, 100_000, 0},
	{"«Choosing a lock»: Redis 万级 ~ 十万级", []string{"redis"}, 10_000, 1_000_000},
	{"«Locks in practice»: ZooKeeper 1-5万/s", []string{"zk"}, 10_000, 50_000},
	{"«Choosing a lock»: ZooKeeper/etcd 千级", []string{"zk", "etcd"}, 1_000, 10_000},
	{"«Locks in practice»: MySQL 1000/s以下", []string{"table", "row"}, 0, 1_000},
	{"«Choosing a lock»: database 千级", []string{"table", "row"}, 1_000, 10_000},
}

// databaseFamilies are the locks the tables call the database's.
var databaseFamilies = map[string]bool{"table": true, "row": true}

// familyBest is a family's best cell: the most pairs a second it did here, the figure its claims
// are judged on — a table's row says what a lock can do.
type familyBest struct {
	slug, name string
	cell       throughputCell
}

func (b familyBest) said() string {
	where := "a key each"
	switch {
	case b.cell.single:
		where = "alone"
	case b.cell.shared:
		where = "one key"
	}
	return fmt.Sprintf("best %s (%d clients, %s)", perSec(b.cell.rate), b.cell.clients, where)
}

// judgeClaims holds each claim against the best cell of each family it names that was measured,
// one judgement per claim and family, and then the ranking both tables give: Redis first, the
// database last. A family that was not measured (ZooKeeper missing) is not judged.
func judgeClaims(claims []throughputClaim, best []familyBest) []Judgement {
	bySlug := map[string]familyBest{}
	for _, b := range best {
		bySlug[b.slug] = b
	}
	var out []Judgement
	for _, cl := range claims {
		for _, slug := range cl.families {
			if b, ok := bySlug[slug]; ok {
				out = append(out, Judgement{Claim: cl.says, Subject: b.name, Measured: b.said(), Held: cl.holds(b.cell.rate)})
			}
		}
	}
	if redis, ok := bySlug["redis"]; ok && len(best) > 1 {
		var next *familyBest
		for i, b := range best {
			if b.slug != "redis" && (next == nil || b.cell.rate > next.cell.rate) {
				next = &best[i]
			}
		}
		out = append(out, Judgement{Claim: "«Choosing a lock» and «Locks in practice»: Redis first", Subject: redis.name + " against the fastest other lock",
			Measured: fmt.Sprintf("%s %s; %s %s", redis.name, perSec(redis.cell.rate), next.name, perSec(next.cell.rate)),
			Held:     redis.cell.rate > next.cell.rate})
	}
	var fastestDB, slowestOther *familyBest
	for i, b := range best {
		switch {
		case databaseFamilies[b.slug] && (fastestDB == nil || b.cell.rate > fastestDB.cell.rate):
			fastestDB = &best[i]
		case !databaseFamilies[b.slug] && (slowestOther == nil || b.cell.rate < slowestOther.cell.rate):
			slowestOther = &best[i]
		}
	}
	if fastestDB != nil && slowestOther != nil {
		out = append(out, Judgement{Claim: "«Choosing a lock» and «Locks in practice»: the database last", Subject: "the faster database lock against the slowest other",
			Measured: fmt.Sprintf("%s %s; %s %s", fastestDB.name, perSec(fastestDB.cell.rate), slowestOther.name, perSec(slowestOther.cell.rate)),
			Held:     fastestDB.cell.rate < slowestOther.cell.rate})
	}
	return out
}

// judgeThroughput is the measurement: the figures of every family, and the claims judged
// against them (judgeClaims). It is complete when every cell was measured and did pairs.
func judgeThroughput(families []lockFamily, table map[string][]throughputCell, clientCounts []int, cellTime, bound time.Duration) Result {
	var best []familyBest
	for _, f := range families {
		b := familyBest{slug: f.slug, name: f.name}
		for _, c := range table[f.slug] {
			if c.rate > b.cell.rate {
				b.cell = c
			}
		}
		best = append(best, b)
	}
	claims := judgeClaims(throughputClaims, best)
	contradicted := map[string]bool{}
	for _, j := range claims {
		if !j.Held {
			contradicted[j.Subject] = true
		}
	}

	most := clientCounts[len(clientCounts)-1]
	complete := true
	var rows []string
	chart := Chart{Title: "Acquire+release pairs a second, 8 clients, a key each (red: a claim about the lock contradicted)", Unit: "pairs/s"}
	for _, f := range families {
		var figs []string
		for _, c := range table[f.slug] {
			if !c.measured || c.pairs == 0 {
				complete = false
			}
			if c.single && c.shared {
				continue // the one-client figure, said once
			}
			where := "a key each"
			if c.shared {
				where = "one key"
			}
			if c.single {
				where = "alone"
			}
			fig := fmt.Sprintf("%d %s %s", c.clients, where, perSec(c.rate))
			if c.timeouts > 0 {
				fig += fmt.Sprintf(" (%d waits ran out)", c.timeouts)
			}
			figs = append(figs, fig)
			if c.clients == 8 && !c.shared {
				chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: c.rate, Failed: contradicted[f.name]})
			}
		}
		rows = append(rows, f.name+": "+strings.Join(figs, ", "))
	}
	return Result{
		Measured: &Measurement{
			Method: fmt.Sprintf("clients loop lock -> unlock for %s a cell, a wait bounded at %s, at %s clients, a key each and one shared key; %d CPUs here, the Redis nodes, etcd and ZooKeeper started on them",
				cellTime, bound, joinInts(clientCounts), runtime.NumCPU()),
			Figures: fmt.Sprintf("%s. Ranking, 8 clients a key each: %s; %d clients one key: %s",
				strings.Join(rows, "; "), ranking(families, table, 8, false), most, ranking(families, table, most, true)),
			Complete: complete,
			Claims:   claims,
		},
		Chart: chart,
	}
}

// joinInts is "1, 8 and 64".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// ranking is the families fastest first in the cell of n clients, shared or not.
func ranking(families []lockFamily, table map[string][]throughputCell, n int, shared bool) string {
	type entry struct {
		name string
		rate float64
	}
	var es []entry
	for _, f := range families {
		for _, c := range table[f.slug] {
			if c.clients == n && c.shared == shared {
				es = append(es, entry{f.name, c.rate})
			}
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(b.rate, a.rate) })
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%s %s", e.name, perSec(e.rate))
	}
	return strings.Join(out, " > ")
}

// perSec is a rate, rounded to what a table of orders of magnitude needs.
func perSec(r float64) string {
	return fmt.Sprintf("%.0f/s", r)
}
