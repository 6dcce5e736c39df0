package lab

import (
	"context"
	"fmt"
	"os"
	"time"

	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

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
