package queued_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

// TestQueuedGroupCommit: the orders one instance accepts for a product while a batch of it is
// being published go out together in the next batch — one message, one record — and none of them
// hears 202 before that batch is stored. Here the first order's batch is held after its publish
// while six more buyers come; once all six wait for the next batch, the first goes on, and the
// six are accepted in one batch and placed.
func TestQueuedGroupCommit(t *testing.T) {
	const more = 6
	var (
		first     sync.Once
		published = make(chan string)
		release   = make(chan struct{})
	)
	cfg := config("queued")
	cfg.Hooks.Published = func(_ context.Context, orderID string) {
		first.Do(func() {
			published <- orderID
			<-release
		})
	}
	inst := newInstances(t, 1, cfg, backendtest.Wiring{})[0]
	ctx := context.Background()
	sku := backendtest.SKU(t)
	_, err := inst.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 10, MaxPerOrder: 1})
	require.NoError(t, err)
	order := func(user string) stock.Order {
		o, _, err := inst.PlaceOrder(ctx, stock.OrderRequest{SKU: sku, UserID: user, Quantity: 1, Strategy: "queued"})
		assert.NoError(t, err, user)
		return o
	}
	var (
		mu       sync.Mutex
		accepted []stock.Order
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		o := order("u-0")
		mu.Lock()
		defer mu.Unlock()
		accepted = append(accepted, o)
	})
	held := <-published
	for i := range more {
		wg.Go(func() {
			o := order(fmt.Sprintf("u-%d", i+1))
			mu.Lock()
			defer mu.Unlock()
			accepted = append(accepted, o)
		})
	}
	// The six, and the first, whose batch is held.
	require.Eventually(t, func() bool { return waitingForABatch() == more+1 }, 10*time.Second, time.Millisecond,
		"the six buyers never all waited for the next batch")
	mu.Lock()
	assert.Empty(t, accepted, "a 202 before its batch was stored")
	mu.Unlock()
	close(release)
	wg.Wait()
	require.Len(t, accepted, more+1)
	heldBatch, _ := orderqueue.BatchOf(held)
	batches := map[string]int{}
	for _, o := range accepted {
		if o.OrderID != held {
			id, ok := orderqueue.BatchOf(o.OrderID)
			require.True(t, ok)
			batches[id]++
		}
	}
	assert.Len(t, batches, 1, "the six in one batch: %v", batches)
	assert.NotContains(t, batches, heldBatch, "the six in the batch after the one in flight")
	messages, orders := backendtest.Histogram(t, "seckill_queue_batch_orders", inst)
	assert.Equal(t, [2]float64{2, more + 1}, [2]float64{float64(messages), orders}, "two messages, for seven orders")
	placed, rejected := backendtest.Ended(t, []backendtest.Instance{inst}, accepted, 10*time.Second)
	assert.Len(t, placed, more+1, "rejected: %v", rejected)
	backendtest.RequireInvariant(t, backendtest.Store(t), sku, placed)
}

// waitingForABatch counts the goroutines of this test process that wait, in the queued strategy's
// Place, for their batch (keyqueue): parked there, not on their way to it.
func waitingForABatch() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	waiting := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "keyqueue.(*Queue[...]).await") && strings.Contains(g, "queued.(*Queued).Place") {
			waiting++
		}
	}
	return waiting
}

// TestQueuedWriterStoppedMidBatch: a writer stops — here cut from the queue and frozen — between
// two sections of one batch: an order placed, a checkout of its batch not yet written. The batch
// must not have been acked: it goes to another writer once its AckWait passes, which finds the
// order placed (no second row) and places the checkout. A batch acked before every order in it is
// decided would leave the checkout, answered 202, neither placed nor rejected, for ever.
func TestQueuedWriterStoppedMidBatch(t *testing.T) {
	srv := natsServers(t, 1)[0]
	proxy := backendtest.StartFaultProxy(t, strings.TrimPrefix(srv.URL, "nats://"))
	base := backendtest.SKU(t)
	a, b := base+"-a", base+"-b"
	var stop sync.Once
	stopped, release := make(chan struct{}), make(chan struct{})
	cfg := backendtest.Wiring{}.Config(t, config("queued"))
	cfg.Queue = backendtest.QueueOn("nats://" + proxy.Listen)
	ack := cfg.Queue.AckWait
	cfg.Service.Hooks.Locking = func(ctx context.Context, skus []string, held int) {
		if len(skus) != 2 || held != 0 {
			return // not the checkout's section, or its first lock taken already
		}
		stop.Do(func() {
			// An ack sent before this moment reaches the server within it.
			assert.Never(t, func() bool { n, ok := depth(srv.URL, a); return ok && n == 0 }, ack/2, 10*time.Millisecond,
				"the batch was acked before its checkout was decided")
			proxy.Stop() // no ack, no nak, no word that it is still at work
			close(stopped)
			select { // frozen, until the test ends
			case <-release:
			case <-ctx.Done():
			}
		})
	}
	first := backendtest.Open(t, cfg, nil)
	t.Cleanup(func() { close(release) }) // before first closes
	ctx := context.Background()
	for _, sku := range []string{a, b} {
		_, err := first.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: t.Name(), Stock: 2, MaxPerOrder: 1})
		require.NoError(t, err)
	}
	f := newFrozenOn(t, backendtest.QueueOn(srv.URL))
	defer f.beat()()
	batch := orderqueue.NewBatch(a)
	f.add(t, &batch, stock.OrderOf(stock.OrderRequest{SKU: a, UserID: "u-1", Quantity: 1}))
	f.add(t, &batch, stock.CheckoutRequest{UserID: "u-2", Lines: []stock.OrderRequest{{SKU: b, Quantity: 1}, {SKU: a, Quantity: 1}}})
	_, err := f.queue.Publish(ctx, batch)
	require.NoError(t, err)
	order, checkout := batch.Orders[0], batch.Orders[1]

	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the first writer never reached the checkout's section")
	}
	placed, err := backendtest.Store(t).Placed(ctx, []string{order.OrderID})
	require.NoError(t, err)
	require.True(t, placed[order.OrderID], "the order of the batch placed before the writer stopped")

	cfg.Queue, cfg.Service.Hooks = backendtest.QueueOn(srv.URL), lockstrategy.Hooks{}
	cfg.Service.Instance = t.Name() + "-second"
	second := backendtest.Open(t, cfg, nil)
	co, err := second.WaitCheckout(ctx, checkout.OrderID, 10*time.Second)
	require.NoError(t, err)
	require.True(t, co.Status.Active(), "the checkout placed by the second writer, within 10 s: %+v", co)
	o, err := second.Order(ctx, order.OrderID)
	require.NoError(t, err)
	assert.True(t, o.Status.Active())
	backendtest.RequireWholeCheckouts(t, backendtest.Store(t), backendtest.SQL(t), []string{a, b}, map[string]int{"u-2": 2}, []stock.Checkout{co})
	backendtest.RequireInvariant(t, backendtest.Store(t), b, []stock.Order{co.Lines[0]})
	pa, err := second.Product(ctx, a)
	require.NoError(t, err)
	assert.EqualValues(t, 0, pa.Stock, "the order and the checkout's line, each once")
}

// depth is how many messages of sku the order queue on the NATS server at url holds, not yet
// acked; false when the server does not say. It runs off the test's goroutine, so it only
// reports.
func depth(url, sku string) (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return 0, false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, false
	}
	st, err := js.Stream(ctx, orderqueue.DefaultStream)
	if err != nil {
		return 0, false
	}
	subject := orderqueue.DefaultSubjects + "." + strings.ReplaceAll(sku, ".", "%2E")
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, false
	}
	return info.State.Subjects[subject], true
}
