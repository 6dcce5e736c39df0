package lockstrategy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/buyer"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// modes are the two ways every fault test runs a strategy: the default configuration (group
// commit) and one order per critical section.
var modes = []struct {
	name  string
	batch int
}{{"default", service.Defaults().GroupCommit}, {"one-per-section", 1}}

// faultInstance builds an instance of strategy on w — whose addresses may be fault proxies — in
// the default configuration but for the group commit of its mode.
func faultInstance(t *testing.T, strategy string, batch int, w backendtest.Wiring) backendtest.Instance {
	t.Helper()
	cfg := config(strategy)
	cfg.GroupCommit = batch
	return newInstances(t, 1, cfg, w)[0]
}

// proxies are the fault proxies between the instances of a fault test and their backends, and
// the gate every database connection sends its COMMITs through.
type proxies struct {
	db, redis, etcd, zk *backendtest.FaultProxy
	commits             *commitGate
}

// commitGate runs a fault, once armed, on the database connection that sends the next COMMIT,
// right before the COMMIT goes: the database commits, and its answer meets the fault.
type commitGate struct {
	mu    sync.Mutex
	fault func()
}

// gates names each commitGate's dialer apart (mysql.RegisterDialContext is process-wide).
var gates atomic.Int64

// network registers a dialer of connections to the database that pass their COMMITs by g, and
// returns its name, for backendtest.StoreVia.
func (g *commitGate) network() string {
	name := fmt.Sprintf("commitgate%d", gates.Add(1))
	mysql.RegisterDialContext(name, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &gatedConn{Conn: c, gate: g}, nil
	})
	return name
}

// atNextCommit runs fault right before the next COMMIT is sent and reports whether one was, within
// the bound; past it, the fault is disarmed.
func (g *commitGate) atNextCommit(fault func(), within time.Duration) bool {
	done := make(chan struct{})
	g.mu.Lock()
	g.fault = func() { fault(); close(done) }
	g.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(within):
	}
	g.mu.Lock()
	armed := g.fault != nil
	g.fault = nil
	g.mu.Unlock()
	if armed {
		return false
	}
	<-done // taken by a COMMIT as the bound passed
	return true
}

// gatedConn is a database connection whose COMMITs pass by its gate.
type gatedConn struct {
	net.Conn
	gate *commitGate
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("COMMIT")) {
		c.gate.mu.Lock()
		fault := c.gate.fault
		c.gate.fault = nil
		c.gate.mu.Unlock()
		if fault != nil {
			fault()
		}
	}
	return c.Conn.Write(p)
}

// faultSale is what the clients of a sale under faults saw.
type faultSale struct {
	ok, soldOut, replayed int
	errs                  map[string]int // non-final answers, retried
	acked                 []stock.Order
	slowest               time.Duration // the longest attempt
}

// retried is how many attempts got a non-final answer.
func (s faultSale) retried() int {
	n := 0
	for _, c := range s.errs {
		n += c
	}
	return n
}

// sellThroughFaults runs buyers against units over the instances, every buyer with its own
// Idempotency-Key and a per-attempt deadline. The buyers arrive one every arrival, not all at
// once: released together, a batched sale of 30 units is over in a few sections, before a fault
// injected after its tenth sale has bitten; arriving over seconds, they keep buying while it
// holds. Busy and unavailable answers — a timeout and an error whose commit outcome is unknown
// are unavailable — are retried with the same key, as a careful client does (buyer.Buyer,
// retrying unavailable too, its attempts on the instances in turn): if the first
// attempt did commit, the retry gets that order back (replayed) instead of a second one. Any
// other answer but an order or sold_out fails the test: a fault must never make a 500, nor any
// answer a client cannot act on. inject runs once, after `at` sales.
func sellThroughFaults(t *testing.T, insts []backendtest.Instance, sku string, units, buyers, at int, inject func()) faultSale {
	t.Helper()
	_, err := insts[0].PutProduct(context.Background(), stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: int64(units), MaxPerOrder: 1})
	require.NoError(t, err)
	deadline, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		res      = faultSale{errs: map[string]int{}}
		wg       sync.WaitGroup
		injected sync.WaitGroup
	)
	const arrival = 25 * time.Millisecond
	start := make(chan struct{})
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("user-%03d", i)
			// Its attempts go to the instances in turn, from its own: a client behind a load
			// balancer.
			b := buyer.Buyer{ID: i, Unavailable: true, Attempt: 3 * time.Second}
			for k := range insts {
				b.Places = append(b.Places, insts[(i+k)%len(insts)].PlaceOrder)
			}
			strategy, _ := insts[0].Resolve("") // the default: never an error
			req := stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: strategy, IdempotencyKey: sku + "/" + user}
			<-start
			time.Sleep(time.Duration(i) * arrival) // its arrival: the sale goes on while the fault holds
			out, err := b.Buy(deadline, req)
			mu.Lock()
			defer mu.Unlock()
			res.slowest = max(res.slowest, out.Slowest)
			for code, n := range out.Retried {
				res.errs[code] += n
			}
			switch {
			case err != nil:
				t.Errorf("under the fault: %v", err)
			case out.Err == nil:
				res.ok++
				res.acked = append(res.acked, out.Order)
				if out.Replayed {
					res.replayed++
				}
				if res.ok == at && inject != nil {
					injected.Add(1)
					go func() { defer injected.Done(); inject() }()
				}
			case errors.Is(out.Err, stock.ErrSoldOut):
				res.soldOut++
			case out.Code() == "busy" || out.Code() == "unavailable":
				t.Errorf("%s: no final answer before the deadline", user)
			default:
				t.Errorf("%s: answered %s under the fault: %v", user, out.Code(), out.Err)
			}
		}()
	}
	close(start)
	wg.Wait()
	injected.Wait()
	return res
}

// TestNetworkFaults cuts, slows and resets the connections between the service and its backends
// with a fault proxy, mid-sale. Whatever happens, the invariant holds, every acknowledged order is
// stored exactly once, and requests whose outcome was unknown are settled by their
// Idempotency-Key on retry. Each fault must also be seen to bite, as its case says — a fault
// that the proxy failed to inject would pass the rest.
func TestNetworkFaults(t *testing.T) {
	t.Parallel() // fault proxies of its own: beside the cluster tests, after the rest
	mysqlAddr := backendtest.MySQLAddr(t)
	if mysqlAddr == "" {
		if backendtest.Required() {
			t.Fatal("network fault tests need MariaDB")
		}
		t.Skip("network fault tests need MariaDB (the embedded store has no network to cut)")
	}
	const units, buyers = 30, 90
	// d is the fault's duration: how long it holds is what the case is about.
	hold := func(d time.Duration, during func(), after func()) func() {
		return func() { during(); time.Sleep(d); after() }
	}
	// What each fault must be seen to do: orders slowed by it, or refused (retried), or placed
	// on the database-guarded path.
	slowed := func(d time.Duration) func(*testing.T, faultSale, []backendtest.Instance) {
		return func(t *testing.T, res faultSale, _ []backendtest.Instance) {
			assert.GreaterOrEqual(t, res.slowest, d, "no attempt was slowed by the fault")
		}
	}
	refused := func(t *testing.T, res faultSale, _ []backendtest.Instance) {
		assert.Positive(t, res.retried(), "no attempt was refused during the fault")
	}
	replayed := func(t *testing.T, res faultSale, _ []backendtest.Instance) {
		assert.Positive(t, res.replayed, "no retry was answered by replay: no commit's answer was lost")
	}
	fellBack := func(t *testing.T, _ faultSale, insts []backendtest.Instance) {
		assert.Positive(t, backendtest.Counter(t, "seckill_redis_fallbacks_total", nil, insts...),
			"no order took the database-guarded path while Redis was cut off")
	}
	for _, tc := range []struct {
		name, strategy string
		fault          func(t *testing.T, p proxies) func()
		felt           func(t *testing.T, res faultSale, insts []backendtest.Instance)
	}{
		{"db latency spike", "pessimistic", func(t *testing.T, p proxies) func() {
			return hold(1500*time.Millisecond, func() {
				p.db.Add(`{"name":"lat","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":300,"jitter":100}}`)
			}, func() { p.db.Remove("lat") })
		}, slowed(200 * time.Millisecond)},
		// The hole holds what is sent until it is removed, so a section inside it waits, and an
		// order admitted meanwhile waits for it. Shorter than the lock wait (2 s), it need not
		// make anyone busy: what it must do is stall the sale for most of its length.
		{"db black hole", "hybrid", func(t *testing.T, p proxies) func() {
			return hold(1500*time.Millisecond, func() {
				p.db.Add(`{"name":"hole","type":"timeout","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`)
			}, func() { p.db.Remove("hole") })
		}, slowed(time.Second)},
		{"db connections reset mid-transaction", "pessimistic", func(t *testing.T, p proxies) func() {
			return hold(1500*time.Millisecond, func() {
				p.db.Add(`{"name":"reset","type":"reset_peer","stream":"upstream","toxicity":1,"attributes":{"timeout":5}}`)
			}, func() { p.db.Remove("reset") })
		}, refused},
		// The reset is added right before a COMMIT is sent: that commit lands, and its answer is
		// the first the reset drops.
		{"db connections reset mid-commit (hybrid)", "hybrid", func(t *testing.T, p proxies) func() {
			return hold(1500*time.Millisecond, func() {
				assert.True(t, p.commits.atNextCommit(func() {
					p.db.Add(`{"name":"reset","type":"reset_peer","stream":"downstream","toxicity":1,"attributes":{"timeout":1}}`)
				}, 10*time.Second), "no COMMIT within 10 s of arming the reset")
			}, func() { p.db.Remove("reset") })
		}, replayed},
		{"redis cut off", "hybrid", func(t *testing.T, p proxies) func() {
			return hold(1500*time.Millisecond, p.redis.Stop, func() { require.NoError(t, p.redis.Start()) })
		}, fellBack},
		{"etcd cut off", "etcd", func(t *testing.T, p proxies) func() {
			return hold(2*time.Second, p.etcd.Stop, func() { require.NoError(t, p.etcd.Start()) })
		}, refused},
		// Within the session timeout (2 s) the sessions survive the cut: orders wait and resume;
		// beyond it they expire, every lock node with them, and the instances sell on new
		// sessions after refusing what was in flight.
		{"zookeeper cut off within the session", "zookeeper", func(t *testing.T, p proxies) func() {
			return hold(time.Second, p.zk.Stop, func() { require.NoError(t, p.zk.Start()) })
		}, slowed(500 * time.Millisecond)},
		{"zookeeper cut off past the session", "zookeeper", func(t *testing.T, p proxies) func() {
			return hold(3*time.Second, p.zk.Stop, func() { require.NoError(t, p.zk.Start()) })
		}, refused},
	} {
		for _, mode := range modes {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				p := proxies{
					db:      backendtest.StartFaultProxy(t, mysqlAddr),
					redis:   backendtest.StartFaultProxy(t, backendtest.RedisAddr(t)),
					etcd:    backendtest.StartFaultProxy(t, hostPort(backendtest.EtcdEndpoints(t)[0])),
					commits: &commitGate{},
				}
				network := p.commits.network()
				var zkServers []string
				if tc.strategy == "zookeeper" {
					p.zk = backendtest.StartFaultProxy(t, backendtest.ZooKeeperServers(t)[0])
					zkServers = []string{p.zk.Listen}
				}
				var insts []backendtest.Instance
				for range instances {
					insts = append(insts, faultInstance(t, tc.strategy, mode.batch, backendtest.Wiring{
						Store: backendtest.StoreVia(t, network, p.db.Listen), RedisAddrs: []string{p.redis.Listen},
						EtcdEndpoints: []string{"http://" + p.etcd.Listen}, ZKServers: zkServers,
					}))
				}
				sku := backendtest.SKU(t)
				res := sellThroughFaults(t, insts, sku, units, buyers, units/3, tc.fault(t, p))
				t.Logf("%s (%s) under %s: %d orders (%d settled by replaying their Idempotency-Key), %d sold out, retried answers %v, slowest attempt %s",
					tc.strategy, mode.name, tc.name, res.ok, res.replayed, res.soldOut, res.errs, res.slowest.Round(time.Millisecond))
				tc.felt(t, res, insts)
				assert.Equal(t, units, res.ok)
				assert.Equal(t, buyers-units, res.soldOut)
				backendtest.RequireInvariant(t, backendtest.Store(t), sku, res.acked)
			})
		}
	}
}

// hostPort strips the scheme of an etcd client URL.
func hostPort(url string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(url) > len(p) && url[:len(p)] == p {
			return url[len(p):]
		}
	}
	return url
}

// commitLosingConn is a database connection that loses the answer to its first COMMIT once
// armed: it sends the COMMIT, then closes before the answer can be read. The database commits;
// the client sees a broken connection — the unknown outcome of a commit.
type commitLosingConn struct {
	net.Conn
	armed *atomic.Bool
}

func (c *commitLosingConn) Write(p []byte) (int, error) {
	if !bytes.Contains(p, []byte("COMMIT")) || !c.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(p)
	_ = c.Conn.Close()
	return n, err
}

// TestUnknownCommitOutcome loses the answer to a COMMIT that the database executed, for each
// strategy whose write commits a transaction. The client sees an error, yet the order exists.
// Retrying with the same Idempotency-Key must return that very order — never place a second one.
func TestUnknownCommitOutcome(t *testing.T) {
	mysqlAddr := backendtest.MySQLAddr(t)
	if mysqlAddr == "" {
		if backendtest.Required() {
			t.Fatal("this fault test needs MariaDB")
		}
		t.Skip("this fault test needs MariaDB (the embedded store has no network to cut)")
	}
	var armed atomic.Bool
	network := "commitloss-" + backendtest.SKU(t)
	mysql.RegisterDialContext(network, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &commitLosingConn{Conn: c, armed: &armed}, nil
	})
	for _, strategy := range []string{"pessimistic", "hybrid", "etcd", "zookeeper"} {
		for _, mode := range modes {
			t.Run(strategy+"/"+mode.name, func(t *testing.T) {
				unknownCommitOutcome(t, strategy, mode.batch, network, mysqlAddr, &armed)
			})
		}
	}
}

// unknownCommitOutcome loses one COMMIT answer of strategy on one instance and retries the
// order on another.
func unknownCommitOutcome(t *testing.T, strategy string, batch int, network, mysqlAddr string, armed *atomic.Bool) {
	lossy := faultInstance(t, strategy, batch, backendtest.Wiring{Store: backendtest.StoreVia(t, network, mysqlAddr)})
	healthy := faultInstance(t, strategy, batch, backendtest.Wiring{})
	s, sku := onSale(t, 5)
	req := stock.OrderRequest{SKU: sku, UserID: "u-1", Quantity: 1, Strategy: strategy, IdempotencyKey: sku + "/u-1"}

	armed.Store(true)
	_, _, err := lossy.PlaceOrder(context.Background(), req)
	require.Error(t, err, "the client lost the COMMIT's answer")
	require.False(t, armed.Load(), "the COMMIT was sent")
	// The COMMIT is in the database's hands: it reads it before it could notice the closed
	// connection, so it commits — but its thread may not have run yet, and on a busy machine
	// that is a race with this read. Give it a moment.
	var stored stock.Order
	require.Eventually(t, func() bool {
		o, err := s.OrderByIdempotencyKey(context.Background(), req.IdempotencyKey)
		stored = o
		return err == nil
	}, 3*time.Second, 10*time.Millisecond, "the database committed the order all the same")

	again, replayed, err := healthy.PlaceOrder(context.Background(), req)
	require.NoError(t, err)
	assert.True(t, replayed, "the retry is a replay")
	assert.Equal(t, stored.OrderID, again.OrderID, "the retry returns the committed order")
	backendtest.RequireInvariant(t, s, sku, []stock.Order{again})
}
