// Package lockloss is the load tool's -fault lock-loss: a thief that takes each sale's lock from
// its holder, over and over, in the backends the service processes share — at the keys the
// service publishes (GET /api/v1/products/{sku}/locks) — and what the fault did to a sale
// (Bite), from the instances' /metrics.
package lockloss

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/loadtest/scrape"
)

// Name is the -fault that takes each sale's lock from its holder, over and over, while
// the sale sells: what a Redis failover (a replica promoted without the key), a lease that
// expired under a paused holder or a ZooKeeper session that timed out does to a lock once in a
// while, made to happen every millisecond or two, so that two holders are inside the section at
// once in every sale. A guarded strategy must keep the invariant through it — its version check
// or fencing token refuses the write of the holder that lost its lock — and its unguarded twin,
// the lock alone, must be caught overselling: a checker that misses it would miss the incident.
const Name = "lock-loss"

// DBLatency is what the fault adds to every answer of the database to the service
// processes (a database under load, the setting of the documents' first pitfall). A lock taken
// from its holder lets a second holder in only if the first is still between its read and its
// write when the second reads; a millisecond-long section, as this service's is on an idle
// database, rarely is — an unguarded strategy would oversell in one sale and not in the next.
// A few milliseconds a statement widen that window past the lock's hand-off in every sale.
const DBLatency = 3 * time.Millisecond

// SlowDatabase starts a proxy in front of the database of dsn that delays every answer by
// latency, and returns the DSN that goes through it.
func SlowDatabase(dsn string, latency time.Duration) (string, func(), error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("-mysql: %w", err)
	}
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		"slow-database", "127.0.0.1:0", cfg.Addr)
	if err := proxy.Start(); err != nil {
		return "", nil, fmt.Errorf("slow database proxy: %w", err)
	}
	toxic := fmt.Sprintf(`{"name":"slow","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d}}`, latency.Milliseconds())
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		proxy.Stop()
		return "", nil, err
	}
	cfg.Addr = proxy.Listen
	return cfg.FormatDSN(), proxy.Stop, nil
}

// MaxTakes bounds the locks the fault takes in one sale. Taking them for ever would be an
// outage, not a failover: past the bound the lock holds again, so that a guarded strategy the
// fault kept answering busy still finishes its sale.
const MaxTakes = 20000

// lockService is a lock service the fault takes locks from, with the strategy that locks with it
// and that strategy's unguarded twin (the same lock, no version check or fence).
type lockService struct {
	guarded, unguarded string
	// backend is the lock's backend as GET .../locks names it.
	backend string
	// guard is the counter of /metrics that grows when the guarded strategy's guard refuses a
	// write the lost lock let through: the version check's retry, or the fence's refusal.
	guard string
	// interval is how often the fault looks at the lock and takes it: a Redis DEL is one cheap
	// round trip; a ZooKeeper take is a listing and then a consensus write; etcd looks every
	// millisecond but takes only a holder seen at two looks (takeEtcd).
	interval time.Duration
	// take takes the lock published under key (GET .../locks) from its holder, if one holds it.
	take func(t *Thief, ctx context.Context, key string) (took bool, err error)
}

// lockServices are the services the fault knows, in the order they are compared.
var lockServices = []lockService{
	{guarded: "hybrid", unguarded: "unguarded-redis", backend: "redis", guard: scrape.Retries,
		interval: time.Millisecond, take: (*Thief).takeRedis},
	{guarded: "etcd", unguarded: "unguarded-etcd", backend: "etcd", guard: scrape.FencedOut,
		interval: time.Millisecond, take: (*Thief).takeEtcd},
	{guarded: "zookeeper", unguarded: "unguarded-zookeeper", backend: "zookeeper", guard: scrape.FencedOut,
		interval: 2 * time.Millisecond, take: (*Thief).takeZooKeeper},
}

// guardTexts name what a guard's counter counts, in the verdicts.
var guardTexts = map[string]string{scrape.Retries: "optimistic retries", scrape.FencedOut: "writes fenced out"}

// Bite is what the fault did to one sale of a guarded strategy: the locks the thief took from a
// holder, and what the strategy's series on /metrics grew by over the selling phase, summed over
// the instances. A guarded row's invariant proves something only if all three happened: a lock
// taken, a strategy that locked (hybrid that fell back to the database path, say, takes no
// lock), and a guard that had to act — else it held trivially, and the row says the fault did
// not bite. The guard acted when its counter grew, or when a holder found its lock gone at
// release: zookeeper's section looks for its node just before it writes and abandons without
// one, which leaves no refused write to count, only the lost lock.
type Bite struct {
	Taken     int    `json:"taken"`            // locks the thief took from a holder
	Locked    int    `json:"locked"`           // seckill_lock_wait_seconds_count{strategy}: the sections that took the lock
	Guard     string `json:"guard"`            // the guard's counter
	Guarded   int    `json:"guarded"`          // its growth: writes the guard refused
	LocksLost int    `json:"locks_lost"`       // seckill_lock_lost_total{strategy}: holders that found their lock gone at release
	Unread    string `json:"unread,omitempty"` // why /metrics could not be read around the sale; then nothing above but Taken is known
}

// NewBite is the bite of a sale of strategy, a guarded one, from the thief's count and one
// sample per instance before and after the selling phase (in the same order); unread is why the
// samples could not be had.
func NewBite(strategy string, taken int, before, after []scrape.Sample, unread error) *Bite {
	s, _ := lockServiceOf(strategy)
	b := &Bite{Taken: taken, Guard: s.guard}
	switch {
	case unread != nil:
		b.Unread = unread.Error()
		return b
	case len(before) != len(after):
		b.Unread = fmt.Sprintf("%d instances sampled before the sale, %d after", len(before), len(after))
		return b
	}
	for i := range after {
		grew := func(metric string) int {
			return int(after[i].Counters[scrape.Series{Metric: metric, Strategy: strategy}] - before[i].Counters[scrape.Series{Metric: metric, Strategy: strategy}])
		}
		key := scrape.Series{Metric: scrape.LockWait, Strategy: strategy}
		if h := after[i].Locks[key]; h != nil {
			b.Locked += int(h.Minus(before[i].Locks[key]).Count)
		}
		b.Guarded += grew(s.guard)
		b.LocksLost += grew(scrape.LockLost)
	}
	return b
}

// Missed says why the fault did not bite strategy's sale; "" when it did.
func (b *Bite) Missed(strategy string) string {
	if b.Unread != "" {
		return "/metrics could not be read around the sale: " + b.Unread
	}
	var why []string
	if b.Taken == 0 {
		why = append(why, "the thief took no lock from a holder")
	}
	if b.Locked == 0 {
		why = append(why, fmt.Sprintf("%s took no lock (%s_count{strategy=%q} did not grow)", strategy, scrape.LockWait, strategy))
	}
	if b.Guarded+b.LocksLost == 0 {
		why = append(why, fmt.Sprintf("its guard never acted (neither %s nor %s{strategy=%q} grew)", b.Guard, scrape.LockLost, strategy))
	}
	return strings.Join(why, "; ")
}

// String is the bite as the verdict gives it.
func (b *Bite) String() string {
	if b.Unread != "" {
		return fmt.Sprintf("%d locks taken from a holder; /metrics unread", b.Taken)
	}
	return fmt.Sprintf("%d locks taken from a holder; %d lock acquisitions, %d %s, %d locks lost", b.Taken, b.Locked, b.Guarded, guardTexts[b.Guard], b.LocksLost)
}

// lockServiceOf is the lock service strategy locks with; ok is false for a strategy whose lock
// the fault does not take (naive has none).
func lockServiceOf(strategy string) (lockService, bool) {
	i := slices.IndexFunc(lockServices, func(s lockService) bool { return strategy == s.guarded || strategy == s.unguarded })
	if i < 0 {
		return lockService{}, false
	}
	return lockServices[i], true
}

// Strategies are the strategies compared under the fault: each lock beside its unguarded twin
// (zookeeper's only withZooKeeper), and naive last, as always.
func Strategies(withZooKeeper bool) []string {
	var out []string
	for _, s := range lockServices {
		if s.guarded == "zookeeper" && !withZooKeeper {
			continue
		}
		out = append(out, s.guarded, s.unguarded)
	}
	return append(out, "naive")
}

// MustOversell reports whether a sale of strategy must be caught overselling, fault being the
// fault that ran on its lock ("": none): naive always, since it has no lock, and an unguarded
// strategy whose lock was taken from it, since nothing else stands between two holders. With no
// fault an unguarded strategy's lock holds, one holder at a time, so no oversell is asked of it:
// it is judged by the invariant like a safe one.
func MustOversell(strategy, fault string) bool {
	return strategy == "naive" || fault == Name && Unguarded(strategy)
}

// Unguarded reports whether strategy is a lock alone, the unguarded twin of a lock strategy.
func Unguarded(strategy string) bool {
	s, ok := lockServiceOf(strategy)
	return ok && strategy == s.unguarded
}

// Thief takes locks from their holders in the backends the service processes share: the
// -redis addresses, the etcd process the tool started, and the ZooKeeper of -zk. It reaches
// into them as an operator's failover would, not through the service — but where each lock is,
// it learns from the service (GET /api/v1/products/{sku}/locks), never from a copy of the key
// layouts: a key renamed in the service is then the key the fault takes.
type Thief struct {
	redis []*redis.Client
	etcd  *clientv3.Client
	zk    *zk.Conn // nil without -zk
	// etcdHolder is the etcd holder the last look saw (key and create revision), read and set only
	// by the fault of the sale running: sales run one after another, on SKUs of their own.
	etcdHolder etcdKey
}

// etcdKey names one etcd key's life: the same name put again is another key.
type etcdKey struct {
	name string
	rev  int64
}

// NewThief connects to the backends the service processes share: the Redis addresses, the etcd
// and the ZooKeeper servers (none: "", comma-separated); close it when the run ends.
func NewThief(redisAddrs, etcd, zkServers string, logs io.Writer) (*Thief, error) {
	t := &Thief{}
	for _, addr := range strings.Split(redisAddrs, ",") {
		t.redis = append(t.redis, redis.NewClient(&redis.Options{Addr: strings.TrimSpace(addr)}))
	}
	var err error
	t.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("-fault %s: etcd: %w", Name, err)
	}
	if zkServers != "" {
		// Only the client's errors are worth a line: its connection chatter is not the sale's.
		t.zk, _, err = zk.Connect(strings.Split(zkServers, ","), 10*time.Second,
			zk.WithLogger(log.New(logs, "loadtest: fault zookeeper client: ", 0)), zk.WithLogInfo(false))
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("-fault %s: zookeeper: %w", Name, err)
		}
	}
	return t, nil
}

func (t *Thief) Close() {
	for _, c := range t.redis {
		_ = c.Close()
	}
	if t.etcd != nil {
		_ = t.etcd.Close()
	}
	if t.zk != nil {
		t.zk.Close()
	}
}

// takeRedis deletes the redsync lock key on every Redis, as a failover to a replica that never
// got the key does (or the key's expiry under a paused holder whose watchdog paused too): the
// next waiter's SET NX succeeds while the holder is still inside. With several addresses
// (Redlock) it goes on all of them.
func (t *Thief) takeRedis(ctx context.Context, key string) (bool, error) {
	took := false
	for _, c := range t.redis {
		n, err := c.Del(ctx, key).Result()
		if err != nil {
			return false, fmt.Errorf("redis DEL %s: %w", key, err)
		}
		took = took || n > 0
	}
	return took, nil
}

// takeEtcd deletes the holder's key of the mutex of prefix, as the expiry of the holder's lease would:
// the holder is the key with the lowest create revision under the mutex's prefix, and the next
// waiter, watching that key, is granted the lock at once. Only a holder that the previous look
// saw holding too, one interval ago: a waiter granted the lock a moment ago still reads its own
// key to confirm it (etcdlock.Mutex.Lock), and one whose key is gone by then fails its attempt — an
// error, not two holders. A lease expires under a holder that is inside its section. And only
// that key while it is still the one read (same create revision), never a waiter's.
func (t *Thief) takeEtcd(ctx context.Context, mutex string) (bool, error) {
	prefix := mutex + "/" // each waiter's key is <mutex>/<lease id>
	held, err := t.etcd.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return false, fmt.Errorf("etcd get %s: %w", prefix, err)
	}
	if len(held.Kvs) == 0 {
		return false, nil
	}
	holder := etcdKey{string(held.Kvs[0].Key), held.Kvs[0].CreateRevision}
	if holder != t.etcdHolder {
		t.etcdHolder = holder
		return false, nil
	}
	resp, err := t.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(holder.name), "=", holder.rev)).
		Then(clientv3.OpDelete(holder.name)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("etcd delete %s: %w", holder.name, err)
	}
	return resp.Succeeded, nil
}

// takeZooKeeper deletes the holder's node in the lock directory dir, as the expiry of the holder's session
// would: the holder is the node with the lowest sequence number, and the waiter watching it
// looks again and finds itself the lowest.
func (t *Thief) takeZooKeeper(_ context.Context, dir string) (bool, error) {
	children, _, err := t.zk.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil // no one has locked it yet, or the last one left (a container node)
	}
	if err != nil {
		return false, fmt.Errorf("zookeeper children of %s: %w", dir, err)
	}
	holder, ok := lowestNode(children)
	if !ok {
		return false, nil
	}
	err = t.zk.Delete(dir+"/"+holder, -1)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil // released since the listing
	}
	if err != nil {
		return false, fmt.Errorf("zookeeper delete %s/%s: %w", dir, holder, err)
	}
	return true, nil
}

// lowestNode is the lock node with the lowest sequence number among children. The names start
// with each waiter's guid (_c_<guid>-lock-0000000042), so they sort by their suffix, not as a
// whole.
func lowestNode(children []string) (string, bool) {
	seq := func(name string) string { return name[strings.LastIndex(name, "-lock-")+len("-lock-"):] }
	var lowest string
	for _, c := range children {
		if !strings.Contains(c, "-lock-") {
			continue
		}
		if lowest == "" || seq(c) < seq(lowest) {
			lowest = c
		}
	}
	return lowest, lowest != ""
}

// Run is the fault on one sale's lock, running until stopped.
type Run struct {
	cancel context.CancelFunc
	done   chan struct{}
	taken  int   // locks taken; read after done
	err    error // what stopped it early; read after done
}

// Start takes strategy's lock of the product of locks (the service's GET .../locks) from its
// holder every interval of the strategy's lock service, until stop or faultMaxTakes locks. It
// returns nil for a strategy whose lock it does not take, and an error when the service names no
// such lock: a sale run under the fault with nothing to take would prove nothing.
func (t *Thief) Start(ctx context.Context, strategy string, locks contract.Locks) (*Run, error) {
	s, ok := lockServiceOf(strategy)
	if !ok {
		return nil, nil
	}
	i := slices.IndexFunc(locks.Locks, func(l contract.Lock) bool { return l.Strategy == strategy })
	if i < 0 {
		return nil, fmt.Errorf("the service names no lock of %s for %s (GET %s): nothing to take", strategy, locks.SKU, "/api/v1/products/"+locks.SKU+"/locks")
	}
	key := locks.Locks[i].Key
	if b := locks.Locks[i].Backend; b != s.backend {
		return nil, fmt.Errorf("the service says %s locks %s in %s, the fault takes locks in %s", strategy, key, b, s.backend)
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Run{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(s.interval)
		defer tick.Stop()
		for f.taken < MaxTakes {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A take once begun runs to its answer, even when the phase ends meanwhile: a DEL
			// cut off by the cancel may have deleted the key all the same, uncounted.
			took, err := t.takeOnce(ctx, s, key)
			if took {
				f.taken++
			}
			if ctx.Err() != nil {
				return // the phase ended mid-take: not a failure of the fault
			}
			if err != nil {
				f.err = err
				return
			}
		}
	}()
	return f, nil
}

// maxTake bounds one take: the phase's end does not cut it off, so a lock service that stopped
// answering must not hold the fault's end.
const maxTake = time.Second

// takeOnce is one take by s of the lock under key, whole whether or not ctx ends during it.
func (t *Thief) takeOnce(ctx context.Context, s lockService, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxTake)
	defer cancel()
	return s.take(t, ctx, key)
}

// Stop ends the fault and says how many locks it took; a nil run (no fault) took none. An error
// means it could not reach the lock service: the sale did not have the fault it is reported under.
func (f *Run) Stop() (int, error) {
	if f == nil {
		return 0, nil
	}
	f.cancel()
	<-f.done
	return f.taken, f.err
}
