package queued_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/natsserver"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/buyer"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

// queuedSaleUnder sells units to buyers arriving one every 10 ms over insts with the queued
// strategy, and injects a fault once units/4 orders are accepted, while buyers keep arriving. A
// buyer told busy or unavailable retries with the same Idempotency-Key (buyer.Buyer), as a
// client that cannot know whether its order went out must: it finds the order if it did. Any
// answer but those, an order or sold_out fails the test: no fault may make a 500. It returns the
// orders accepted, every answer heard (retries included), and when the fault's injection
// returned.
func queuedSaleUnder(t *testing.T, insts []backendtest.Instance, sku string, units, buyers int, inject func()) ([]stock.Order, map[string]int, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := insts[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: int64(units), MaxPerOrder: 1})
	require.NoError(t, err)
	var (
		mu           sync.Mutex
		accepted     []stock.Order
		outcomes     = map[string]int{}
		faulted      time.Time
		wg, injected sync.WaitGroup
	)
	for i := range buyers {
		wg.Go(func() {
			inst := insts[i%len(insts)]
			user := fmt.Sprintf("user-%03d", i)
			req := stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued", IdempotencyKey: sku + "/" + user}
			time.Sleep(time.Duration(i) * 10 * time.Millisecond) // its arrival: the sale goes on while the fault holds
			out, err := buyer.Buyer{ID: i, Places: []buyer.Place{inst.PlaceOrder}, Unavailable: true}.Buy(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			for code, n := range out.Retried {
				outcomes[code] += n
			}
			outcomes[out.Code()]++
			switch code := out.Code(); {
			case err != nil:
				t.Errorf("under the fault: %v", err)
			case code == "ok":
				accepted = append(accepted, out.Order)
				if len(accepted) == units/4 {
					injected.Go(func() {
						inject()
						mu.Lock()
						faulted = time.Now()
						mu.Unlock()
					})
				}
			case code == "busy" || code == "unavailable":
				t.Errorf("%s: no final answer before the deadline", user)
			case code != "sold_out":
				t.Errorf("%s: answered %s under the fault: %v", user, code, out.Err)
			}
		})
	}
	wg.Wait()
	injected.Wait()
	t.Logf("answers, retries included: %v", outcomes)
	return accepted, outcomes, faulted
}

// natsServers starts n nats-server processes, one cluster (or a lone server), for t alone, and
// kills them when it ends; without the binary the test fails when backends are required and
// skips, saying so, otherwise.
func natsServers(t *testing.T, n int) []*natsserver.Server {
	t.Helper()
	if err := natsserver.Available(); err != nil {
		if backendtest.Required() {
			t.Fatalf("nats-server is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skip(err)
	}
	servers, err := natsserver.New(t.TempDir(), n)
	require.NoError(t, err)
	require.NoError(t, natsserver.StartAll(servers))
	t.Cleanup(func() { natsserver.Kill(servers...) })
	t.Cleanup(func() {
		if t.Failed() {
			for _, srv := range servers {
				queueState(t, srv)
			}
		}
	})
	return servers
}

// queueState logs what srv holds of the default order queue — the stream's sequences and
// messages, the writers' consumer's delivered and acked floor — and the warnings in its log: what
// a failed test needs to tell a lost ack from a stream that restarted behind its consumer.
func queueState(t *testing.T, srv *natsserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if nc, err := nats.Connect(srv.URL, nats.Timeout(time.Second), nats.NoReconnect()); err == nil {
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if st, err := js.Stream(ctx, orderqueue.DefaultStream); err == nil {
			t.Logf("%s: stream %+v", srv.URL, st.CachedInfo().State)
			if c, err := st.Consumer(ctx, orderqueue.DefaultConsumer); err == nil {
				ci := c.CachedInfo()
				t.Logf("%s: consumer delivered %+v, ack floor %+v, pending %d, ack pending %d, redelivered %d",
					srv.URL, ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
			}
		}
	}
	log, _ := os.ReadFile(filepath.Join(srv.Dir, "server.log"))
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "[WRN]") || strings.Contains(line, "[ERR]") {
			t.Logf("%s: %s", srv.URL, strings.TrimSpace(line))
		}
	}
}

// TestQueuedNATSRestart kills the queue's server (SIGKILL) mid-sale and starts it again on its
// store three seconds later. A publish retries, with the same id, for its budget (2 s); past it
// orders are refused as unavailable — never accepted and lost — and admission's units of those
// whose publish was cut off come back (the sweeper asks the queue once it answers again). A 202
// is durable: every order accepted before or after the kill ends placed within 10 s of the
// restart (none rejected: the stock outlasts them), every unit sells, and the invariant holds.
func TestQueuedNATSRestart(t *testing.T) {
	servers := natsServers(t, 1)
	srv := servers[0]
	var insts []backendtest.Instance
	for range instances {
		c := backendtest.Wiring{}.Config(t, config("queued"))
		c.Queue = backendtest.QueueOn(srv.URL)
		insts = append(insts, backendtest.Open(t, c, nil))
	}
	sku := backendtest.SKU(t)
	const units = 40
	accepted, outcomes, restarted := queuedSaleUnder(t, insts, sku, units, 3*units, func() {
		srv.Kill()
		time.Sleep(3 * time.Second) // the outage: its length is the fault
		assert.NoError(t, srv.Start())
	})
	placed, rejected := backendtest.Ended(t, insts, accepted, time.Until(restarted.Add(10*time.Second)))
	assert.Empty(t, rejected, "orders answered 202 and then rejected: the queue's crash took what it had acknowledged")
	assert.Positive(t, outcomes["unavailable"], "no order was refused while the queue was down: the fault missed the sale")
	settled(t, insts[0], sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.Equal(t, units, len(placed)+int(a.Stock), "every unit sold to one accepted order, or back on sale")
	assert.LessOrEqual(t, int(a.Stock), len(rejected), "units on sale that no rejected order gave back")
}

// TestQueuedClusterLosesANode kills (SIGKILL) the node that leads the order stream of a
// three-node JetStream cluster mid-sale. The stream, the writers' consumer and the records are
// replicated on all three; the other two elect new leaders, and the instances, connected to the
// whole cluster, carry on. Orders answer 503 while leaders move and are retried with their key;
// every order accepted ends placed within 10 s of the kill (a 202 is durable: none rejected),
// every unit sells once, and the invariant holds.
func TestQueuedClusterLosesANode(t *testing.T) {
	t.Parallel() // servers of its own: beside the other cluster tests, after the rest
	servers := natsServers(t, 3)
	var insts []backendtest.Instance
	for range instances {
		c := backendtest.Wiring{}.Config(t, config("queued"))
		c.Queue = backendtest.QueueOn(natsserver.URLs(servers...)...)
		insts = append(insts, backendtest.Open(t, c, nil))
	}
	sku := backendtest.SKU(t)
	const units = 40
	var leader string
	accepted, outcomes, killed := queuedSaleUnder(t, insts, sku, units, 3*units, func() {
		leader = streamLeader(t, servers)
		for _, s := range servers {
			if s.Name == leader {
				s.Kill()
			}
		}
	})
	t.Logf("killed %s, the stream's leader; answers %v", leader, outcomes)
	placed, rejected := backendtest.Ended(t, insts, accepted, time.Until(killed.Add(10*time.Second)))
	t.Logf("the queue's events on the instances: %v", queueEvents(t, insts))
	assert.Empty(t, rejected, "orders answered 202 and then rejected: the lost node took what the cluster had acknowledged")
	settled(t, insts[0], sku)
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.Equal(t, units, len(placed)+int(a.Stock), "every unit sold to one accepted order, or back on sale")
	assert.LessOrEqual(t, int(a.Stock), len(rejected), "units on sale that no rejected order gave back")
}

// queueEvents sums seckill_queue_orders_total by event over insts: how many messages were
// redelivered, or sent again, on the way.
func queueEvents(t *testing.T, insts []backendtest.Instance) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, in := range insts {
		families, err := in.Metrics.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != "seckill_queue_orders_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "event" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}

// streamLeader names the member of servers that leads the order stream.
func streamLeader(t *testing.T, servers []*natsserver.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(strings.Join(natsserver.URLs(servers...), ","), nats.Timeout(time.Second))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, orderqueue.DefaultStream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	require.NotEmpty(t, info.Cluster.Leader)
	return info.Cluster.Leader
}

// TestQueuedRedisFlushed flushes admission's Redis mid-sale: the reservations of queued orders
// are gone and the counter is warmed again from the database, which does not yet count the
// orders still queued — so admission accepts more than the stock for a while, and the writers
// reject the excess as sold_out. Every accepted order still ends within 10 s of the flush,
// placed or rejected, and the database never sells a unit twice.
func TestQueuedRedisFlushed(t *testing.T) {
	rp := backendtest.StartRedis(t)
	insts := newInstances(t, instances, config("queued"), backendtest.Wiring{RedisAddrs: []string{rp.Addr}})
	sku := backendtest.SKU(t)
	const units = 40
	accepted, _, flushed := queuedSaleUnder(t, insts, sku, units, 3*units, func() {
		assert.NoError(t, redis.NewClient(&redis.Options{Addr: rp.Addr}).FlushAll(context.Background()).Err())
	})
	placed, rejected := backendtest.Ended(t, insts, accepted, time.Until(flushed.Add(10*time.Second)))
	t.Logf("%d accepted: %d placed, %d rejected", len(accepted), len(placed), len(rejected))
	for id, reason := range rejected {
		assert.Equal(t, "sold_out", reason, "order %s", id)
	}
	assert.Len(t, placed, units, "every unit sold, each to one accepted order")
	a := backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
	assert.Zero(t, a.Stock)
}
