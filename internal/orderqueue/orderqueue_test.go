package orderqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/natsserver"
)

// realURL is the NATS server the tests use: SECKILL_TEST_NATS_URL, or one nats-server of the
// test process's own (natsserver: the version the service embeds), started on first use and
// killed by TestMain. With none to reach or start, the test is skipped — or fails with
// SECKILL_TEST_REQUIRE_BACKENDS=1 (as in CI).
func realURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("SECKILL_TEST_NATS_URL")
	if url == "" {
		shared.once.Do(func() {
			if err := natsserver.Available(); err != nil {
				shared.err = err
				return
			}
			if shared.dir, shared.err = os.MkdirTemp("", "orderqueue-test-nats-"); shared.err != nil {
				return
			}
			var ss []*natsserver.Server
			if ss, shared.err = natsserver.New(shared.dir, 1); shared.err == nil {
				if shared.err = natsserver.StartAll(ss); shared.err == nil {
					shared.server = ss[0]
				}
			}
		})
		if shared.err != nil {
			needServers(t, shared.err)
		}
		return shared.server.URL
	}
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err == nil {
		nc.Close()
		return url
	}
	needServers(t, fmt.Errorf("%s: %w", url, err))
	return ""
}

// shared is the test process's own server, for realURL.
var shared struct {
	once   sync.Once
	server *natsserver.Server
	dir    string
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		shared.server.Kill()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// needServers fails the test when backends are required, and skips it otherwise.
func needServers(t *testing.T, why error) {
	t.Helper()
	if os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
		t.Fatalf("NATS is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", why)
	}
	t.Skipf("this test needs a NATS server with JetStream: %v", why)
}

// unique returns a name no other test uses, for streams, buckets and consumers.
func unique(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "_" + strings.ToUpper(hex.EncodeToString(b))
}

// testConfig is cfg with unique names, short bounds and a quick AckWait.
func testConfig(cfg Config) Config {
	id := unique("T")
	cfg.Stream, cfg.Bucket, cfg.Consumer, cfg.Subjects = "ORDERS_"+id, "RECORDS_"+id, "writers_"+id, "test."+id+".orders"
	// A test's own bounds: small, and a short AckWait so that a stopped writer's orders move on.
	bound := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	bound(&cfg.MaxMsgs, 10_000)
	bound(&cfg.MaxBytes, 1<<20)
	if cfg.AckWait == 0 {
		cfg.AckWait = time.Second
	}
	cfg.Duplicates, cfg.MaxAckPending, cfg.RecordTTL = time.Minute, 1000, time.Hour
	return cfg
}

// open opens a queue on cfg and removes its stream and bucket at the end of the test (on a
// shared server) and closes it.
func open(t *testing.T, cfg Config) *Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := Open(ctx, cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})), prometheus.NewRegistry())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if q.embedded == nil {
			_ = q.js.DeleteStream(ctx, cfg.Stream)
			_ = q.js.DeleteKeyValue(ctx, cfg.Bucket)
		}
		q.Close()
	})
	return q
}

// backends runs test against the machine's NATS server and an embedded one.
func backends(t *testing.T, cfg Config, test func(t *testing.T, q *Queue)) {
	t.Run("server", func(t *testing.T) {
		c := testConfig(cfg)
		c.URLs = []string{realURL(t)}
		test(t, open(t, c))
	})
	t.Run("embedded", func(t *testing.T) {
		c := testConfig(cfg)
		c.DataDir = t.TempDir()
		test(t, open(t, c))
	})
}

// batch is a batch of sku with an order of one unit for each user, in that order.
func batch(sku string, users ...string) Batch {
	b := NewBatch(sku)
	for _, u := range users {
		id := b.NewID()
		b.Orders = append(b.Orders, Order{OrderID: id, SKU: sku, UserID: u, Reservation: id, AcceptedAt: time.Now().UTC(),
			Lines: []Line{{OrderID: id, SKU: sku, Quantity: 1}}})
	}
	return b
}

// users are the buyers of the orders of t's batches, in the order the queue took them.
func users(t Taken) []string {
	var out []string
	for _, d := range t.Deliveries {
		for _, o := range d.Batch.Orders {
			out = append(out, o.UserID)
		}
	}
	return out
}

// fetchAll fetches until n messages have come, within 10 s, and merges them by product in the
// order they came: a fetch takes what its consumer has been told of, which lags the stream by a
// moment, so one fetch right after a publish may come back short.
func fetchAll(t *testing.T, q *Queue, n int) []Taken {
	t.Helper()
	ctx := ctxT(t)
	var got []*Delivery
	for deadline := time.Now().Add(10 * time.Second); len(got) < n && time.Now().Before(deadline); {
		taken, err := q.Fetch(ctx, n-len(got), time.Second)
		require.NoError(t, err)
		for _, tk := range taken {
			got = append(got, tk.Deliveries...)
		}
	}
	require.Len(t, got, n, "messages fetched within 10 s")
	return byProduct(got)
}

// startServers starts n nats-server processes, one cluster or a lone server, and kills them
// when the test ends; with no server to build the test fails when backends are required, and
// skips otherwise.
func startServers(t *testing.T, n int) []*natsserver.Server {
	t.Helper()
	if err := natsserver.Available(); err != nil {
		needServers(t, err)
	}
	ss, err := natsserver.New(t.TempDir(), n)
	require.NoError(t, err)
	require.NoError(t, natsserver.StartAll(ss))
	t.Cleanup(func() { natsserver.Kill(ss...) })
	return ss
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPublishFetchAck: batches come back grouped by product in the order they were queued, and
// an acked batch leaves the queue (a work queue: the backlog is what is not yet written).
func TestPublishFetchAck(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		for _, b := range []Batch{batch("a", "1"), batch("b.x", "2"), batch("a", "3", "5"), batch("b.x", "4")} {
			dup, err := q.Publish(ctx, b)
			require.NoError(t, err)
			assert.False(t, dup)
		}
		a, err := q.BacklogOf(ctx, "a")
		require.NoError(t, err)
		assert.EqualValues(t, 2, a.Depth, "one message per batch")
		assert.WithinDuration(t, time.Now(), a.Oldest, 5*time.Second)
		all, err := q.Backlogs(ctx)
		require.NoError(t, err)
		assert.Len(t, all, 2)

		taken := fetchAll(t, q, 4)
		require.Len(t, taken, 2)
		assert.Equal(t, "a", taken[0].SKU)
		assert.Equal(t, []string{"1", "3", "5"}, users(taken[0]))
		assert.Equal(t, "b.x", taken[1].SKU, "a dotted SKU travels as one subject token")
		assert.Equal(t, []string{"2", "4"}, users(taken[1]))
		for _, tk := range taken {
			for _, d := range tk.Deliveries {
				assert.EqualValues(t, 1, d.Deliveries)
				assert.False(t, d.Resent)
				require.NoError(t, d.Ack())
			}
		}
		require.Eventually(t, func() bool {
			a, err := q.BacklogOf(ctx, "a")
			return err == nil && a.Depth == 0
		}, 5*time.Second, 20*time.Millisecond, "acked batches leave the queue")
		none, err := q.Fetch(ctx, 10, 200*time.Millisecond)
		require.NoError(t, err)
		assert.Empty(t, none)
	})
}

// TestBatchOf: an order's id is a ULID that names its batch, distinct from every other order's
// of the batch; an id minted elsewhere names none that a batch has.
func TestBatchOf(t *testing.T) {
	b := batch("a", "1", "2", "3")
	seen := map[string]bool{}
	for _, o := range b.Orders {
		_, err := ulid.ParseStrict(o.OrderID)
		require.NoError(t, err, "an order id is a ULID")
		id, ok := BatchOf(o.OrderID)
		require.True(t, ok)
		assert.Equal(t, b.ID, id)
		assert.False(t, seen[o.OrderID], "an id minted twice")
		seen[o.OrderID] = true
	}
	other, ok := BatchOf(ulid.Make().String())
	assert.True(t, ok)
	assert.NotEqual(t, b.ID, other)
	for _, bad := range []string{"", "1", "nobody", b.ID, "*" + b.Orders[0].OrderID[1:]} {
		_, ok := BatchOf(bad)
		assert.False(t, ok, "%q", bad)
	}
}

// TestFetchTakesWhatWaits: a fetch answers at once with what is queued (no waiting for a full
// batch), and an idle fetch returns the first order to come without waiting for its wait — the
// order published once the fetch is seen waiting at the server.
func TestFetchTakesWhatWaits(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		const wait = 10 * time.Second
		ctx := ctxT(t)
		_, err := q.Publish(ctx, batch("a", "1"))
		require.NoError(t, err)
		start := time.Now()
		b, err := q.Fetch(ctx, 100, wait)
		require.NoError(t, err)
		require.Len(t, b, 1)
		assert.Less(t, time.Since(start), wait/2, "one waiting batch, taken without waiting for 99 more")
		require.NoError(t, b[0].Deliveries[0].Ack())

		// The late publish is waited for before the test ends: a retried publish logs, and a log
		// line after the test has ended panics.
		published := make(chan error, 1)
		go func() {
			// The idle fetch's pull request, waiting at the server for the first order.
			if !assert.Eventually(t, func() bool {
				info, err := q.consumer.Info(ctx)
				return err == nil && info.NumWaiting > 0
			}, wait/2, 5*time.Millisecond, "the idle fetch never waited at the server") {
				published <- nil
				return
			}
			_, err := q.Publish(ctx, batch("a", "2"))
			published <- err
		}()
		defer func() { require.NoError(t, <-published) }()
		start = time.Now()
		b, err = q.Fetch(ctx, 100, wait)
		require.NoError(t, err)
		require.Len(t, b, 1)
		assert.Equal(t, []string{"2"}, users(b[0]))
		assert.Less(t, time.Since(start), wait/2, "an idle fetch returns when the first batch comes, not at its wait's end")
		require.NoError(t, b[0].Deliveries[0].Ack())
	})
}

// TestIdleFetchEndsWithItsContext: a writer's idle fetch, waiting at the server for an order,
// returns as soon as its context ends — a writer that stops (Close, shutdown) does not first
// wait out its idle pull.
func TestIdleFetchEndsWithItsContext(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		const wait = 10 * time.Second
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		cancelled := make(chan struct{})
		go func() {
			defer close(cancelled)
			// Cancelled once the idle fetch's pull request waits at the server.
			assert.Eventually(t, func() bool {
				info, err := q.consumer.Info(ctxT(t))
				return err == nil && info.NumWaiting > 0
			}, wait/2, 5*time.Millisecond, "the idle fetch never waited at the server")
			cancel()
		}()
		start := time.Now()
		_, err := q.Fetch(ctx, 100, wait)
		took := time.Since(start)
		<-cancelled
		assert.ErrorIs(t, err, context.Canceled)
		assert.Less(t, took, wait/2, "the idle fetch waited out its wait after its context ended")
	})
}

// TestDuplicateDropped: a batch re-sent with the same id is dropped and reported as a
// duplicate: one batch, however often its publish is retried.
func TestDuplicateDropped(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		b := batch("a", "1", "2")
		dup, err := q.Publish(ctx, b)
		require.NoError(t, err)
		assert.False(t, dup)
		dup, err = q.Publish(ctx, b)
		require.NoError(t, err)
		assert.True(t, dup)
		backlog, err := q.BacklogOf(ctx, "a")
		require.NoError(t, err)
		assert.EqualValues(t, 1, backlog.Depth)
		assert.Equal(t, 2.0, testutil.ToFloat64(q.orders.WithLabelValues("accepted")), "two orders accepted, once")
	})
}

// TestFullQueueRefuses: past its bound the queue refuses the next batch with ErrFull and keeps
// every batch it took (DiscardNew: an order answered 202 is never the one dropped).
func TestFullQueueRefuses(t *testing.T) {
	backends(t, Config{MaxMsgs: 2}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		for _, u := range []string{"1", "2"} {
			_, err := q.Publish(ctx, batch("a", u))
			require.NoError(t, err)
		}
		_, err := q.Publish(ctx, batch("a", "3"))
		require.ErrorIs(t, err, ErrFull)
		b := fetchAll(t, q, 2)
		require.Len(t, b, 1)
		assert.Equal(t, []string{"1", "2"}, users(b[0]))
		for _, d := range b[0].Deliveries {
			require.NoError(t, d.Ack())
		}
		require.Eventually(t, func() bool {
			_, err := q.Publish(ctx, batch("a", "3"))
			return err == nil
		}, 5*time.Second, 50*time.Millisecond, "room again once batches are written")
	})
}

// TestRedelivery: a batch its writer neither acks nor naks within AckWait (the writer was
// killed) goes to the next fetch, counted as delivered twice; a nak hands it back at once. A
// batch sent again (Resend) is marked so on its first delivery.
func TestRedelivery(t *testing.T) {
	backends(t, Config{AckWait: 500 * time.Millisecond}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		_, err := q.Publish(ctx, batch("a", "1"))
		require.NoError(t, err)
		b, err := q.Fetch(ctx, 10, time.Second)
		require.NoError(t, err)
		require.Len(t, b, 1)
		abandoned := time.Now()

		b, err = q.Fetch(ctx, 10, 3*time.Second)
		require.NoError(t, err)
		require.Len(t, b, 1, "redelivered after AckWait")
		assert.GreaterOrEqual(t, time.Since(abandoned), 400*time.Millisecond, "not before AckWait")
		d := b[0].Deliveries[0]
		assert.EqualValues(t, 2, d.Deliveries)
		require.NoError(t, d.Nak(0))

		b, err = q.Fetch(ctx, 10, 3*time.Second)
		require.NoError(t, err)
		require.Len(t, b, 1, "a naked batch comes back")
		assert.EqualValues(t, 3, b[0].Deliveries[0].Deliveries)
		require.NoError(t, b[0].Deliveries[0].Ack())

		again := batch("a", "2")
		_, err = q.Resend(ctx, again)
		require.NoError(t, err)
		b = fetchAll(t, q, 1)
		d = b[0].Deliveries[0]
		assert.EqualValues(t, 1, d.Deliveries)
		assert.True(t, d.Resent, "a batch sent again says so")
		assert.Equal(t, again.ID, d.Batch.ID)
		require.NoError(t, d.Ack())
	})
}

// TestFirstRecordDecides: the first record of a batch stands — a sweeper's rejection after the
// publisher's queued record changes nothing, and the publisher's queued record after a sweeper's
// rejection learns it was given up — also when both race.
func TestFirstRecordDecides(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		one := batch("a", "1", "2")
		got, err := q.Record(ctx, BatchRecord{Batch: one, State: Queued})
		require.NoError(t, err)
		assert.Equal(t, Queued, got.State)
		got, err = q.Record(ctx, BatchRecord{Batch: one, State: Rejected, Reason: "unavailable"})
		require.NoError(t, err)
		assert.Equal(t, Queued, got.State, "a rejection after the queued record does not stand")
		r, err := q.Get(ctx, one.Orders[1].OrderID)
		require.NoError(t, err)
		assert.Equal(t, Queued, r.State)
		assert.Equal(t, "2", r.UserID, "an order's record, from its batch's")

		two := batch("a", "3")
		got, err = q.Record(ctx, BatchRecord{Batch: two, State: Rejected, Reason: "unavailable"})
		require.NoError(t, err)
		assert.Equal(t, Rejected, got.State)
		got, err = q.Record(ctx, BatchRecord{Batch: two, State: Queued})
		require.NoError(t, err)
		assert.Equal(t, Rejected, got.State, "a queued record after the rejection learns it")
		r, err = q.Get(ctx, two.Orders[0].OrderID)
		require.NoError(t, err)
		assert.Equal(t, Rejected, r.State)
		assert.Equal(t, "unavailable", r.Reason)

		for range 20 {
			b := batch("a", "race")
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				states = map[State]int{}
				start  = make(chan struct{})
			)
			for j := range 4 {
				wg.Go(func() {
					state := Queued
					if j%2 == 1 {
						state = Rejected
					}
					<-start
					r, err := q.Record(ctx, BatchRecord{Batch: b, State: state})
					assert.NoError(t, err)
					mu.Lock()
					states[r.State]++
					mu.Unlock()
				})
			}
			close(start)
			wg.Wait()
			assert.Len(t, states, 1, "every racer sees the one record that stands: %v", states)
		}
	})
}

// TestRejectOnce: a rejection ends an order of a queued batch once, in the batch's record, and
// the first stands against any later one; placed is said, not stored — the order's row says it.
// A batch given up stands as it is.
func TestRejectOnce(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		one := batch("a", "1", "2")
		_, err := q.Record(ctx, BatchRecord{Batch: one, State: Queued})
		require.NoError(t, err)
		q.Placed(Record{Order: one.Orders[0], State: Placed})
		r, err := q.Get(ctx, one.Orders[0].OrderID)
		require.NoError(t, err)
		assert.Equal(t, Queued, r.State, "placed is not written to the record")
		got, err := q.Reject(ctx, Unread(one), map[string]string{one.Orders[1].OrderID: "sold_out"})
		require.NoError(t, err)
		assert.Equal(t, Queued, got.State, "the batch stays queued")
		r, err = q.Get(ctx, one.Orders[1].OrderID)
		require.NoError(t, err)
		assert.Equal(t, Rejected, r.State)
		assert.Equal(t, "sold_out", r.Reason)
		assert.Equal(t, "2", r.UserID, "the record carries the order")
		r, err = q.Get(ctx, one.Orders[0].OrderID)
		require.NoError(t, err)
		assert.Equal(t, Queued, r.State, "the other order of the batch is not rejected")

		two := batch("a", "3")
		_, err = q.Reject(ctx, Unread(two), map[string]string{two.Orders[0].OrderID: "sold_out"})
		require.NoError(t, err, "a rejection with no record before it")
		r, err = q.Get(ctx, two.Orders[0].OrderID)
		require.NoError(t, err)
		assert.Equal(t, "sold_out", r.Reason)

		// From a claim: the record as the writer took it is replaced, unless it changed since.
		three := batch("a", "4")
		id := three.Orders[0].OrderID
		c, err := q.Claim(ctx, three)
		require.NoError(t, err)
		assert.Equal(t, Queued, c.State, "a claim writes the record its publisher did not")
		stale, err := q.Claim(ctx, three)
		require.NoError(t, err)
		_, err = q.Reject(ctx, c, map[string]string{id: "sold_out"})
		require.NoError(t, err)
		got, err = q.Reject(ctx, stale, map[string]string{id: "sale_ended"})
		require.NoError(t, err)
		assert.Equal(t, "sold_out", got.Rejected[id], "a claim taken before another writer's end does not overwrite it")
		c, err = q.Claim(ctx, three)
		require.NoError(t, err)
		assert.Equal(t, "sold_out", c.Rejected[id], "a claim reads the record that stands")

		four := batch("a", "5")
		_, err = q.Record(ctx, BatchRecord{Batch: four, State: Rejected, Reason: "unavailable"})
		require.NoError(t, err)
		got, err = q.Reject(ctx, Unread(four), map[string]string{four.Orders[0].OrderID: "sold_out"})
		require.NoError(t, err)
		assert.Equal(t, Rejected, got.State)
		assert.Empty(t, got.Rejected, "a batch given up stands as it is")

		_, err = q.Get(ctx, "nobody")
		require.ErrorIs(t, err, ErrNotFound)
		_, err = q.Get(ctx, NewBatch("a").NewID())
		require.ErrorIs(t, err, ErrNotFound)
	})
}

// TestWaitEndsOnEnd: a wait ends as soon as the order's end is said (not a poll), and
// otherwise answers the record as it stands when the wait passes.
func TestWaitEndsOnEnd(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		waitsEnd(t, q)
	})
}

// TestWaitOnAnOrderRecordedHere: a wait on an order this instance recorded queued reads nothing
// before its time passes — the order is queued until its end is said — and reads it once then.
func TestWaitOnAnOrderRecordedHere(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		b := batch("a", "here")
		_, err := q.Record(ctx, BatchRecord{Batch: b, State: Queued})
		require.NoError(t, err)
		before := q.nc.Stats().OutMsgs
		r, err := q.Wait(ctx, b.Orders[0].OrderID, 200*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, Queued, r.State)
		assert.EqualValues(t, 1, q.nc.Stats().OutMsgs-before, "one read, once the wait passed")
	})
}

// TestHeardKeepsEnds: the watch keeps the first end heard of an order, and at most two
// generations of heardKept.
func TestHeardKeepsEnds(t *testing.T) {
	w := &watch{recent: [2]map[string]Record{{}, {}}}
	end := func(id string, s State) Record { return Record{Order: Order{OrderID: id, SKU: "a"}, State: s} }
	assert.True(t, w.keep(end("1", Placed)))
	assert.False(t, w.keep(end("1", Rejected)), "an end said again")
	r, ok := w.latest("1")
	require.True(t, ok)
	assert.Equal(t, Placed, r.State)
	for i := range 3 * heardKept {
		w.keep(end(strconv.Itoa(i+10), Rejected))
	}
	assert.LessOrEqual(t, len(w.recent[0])+len(w.recent[1]), 2*heardKept)
	_, ok = w.latest(strconv.Itoa(3*heardKept + 9))
	assert.True(t, ok)
	_, ok = w.latest("10")
	assert.False(t, ok, "the oldest generation is dropped")
}

// listening reports whether a wait for the order id listens to the watch.
func listening(q *Queue, id string) bool {
	w := q.watch.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waits[id]) > 0
}

// waitsEnd: a wait ends at once on the final record, holds a queued one until wait passes, and
// never takes a refused write for the record. Each write comes once the wait listens.
func waitsEnd(t *testing.T, q *Queue) {
	t.Helper()
	ctx := ctxT(t)
	b := batch("a", "1", "2")
	one, two := b.Orders[0], b.Orders[1]
	_, err := q.Record(ctx, BatchRecord{Batch: b, State: Queued})
	require.NoError(t, err)
	start := time.Now()
	r, err := q.Wait(ctx, one.OrderID, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, Queued, r.State)
	assert.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)

	const wait = 10 * time.Second
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if assert.Eventually(t, func() bool { return listening(q, one.OrderID) }, wait/2, time.Millisecond, "the wait never listened") {
			q.Placed(Record{Order: one, State: Placed, Row: &Row{Status: "confirmed"}})
		}
	}()
	defer func() { <-finished }()
	start = time.Now()
	r, err = q.Wait(ctx, one.OrderID, wait)
	require.NoError(t, err)
	assert.Equal(t, Placed, r.State)
	require.NotNil(t, r.Row, "the end said carries the row")
	assert.Equal(t, "confirmed", r.Row.Status)
	assert.Less(t, time.Since(start), wait/2, "ended on the end said, not at the wait's end")

	start = time.Now()
	r, err = q.Wait(ctx, one.OrderID, time.Second)
	require.NoError(t, err)
	assert.Equal(t, Placed, r.State, "an end heard answers at once")
	assert.Less(t, time.Since(start), time.Second/2)
	assert.Nil(t, r.Row, "heard before: the row may have moved on since")

	_, err = q.Wait(ctx, "nobody", 200*time.Millisecond)
	require.ErrorIs(t, err, ErrNotFound)
	// A rejection ends the wait too, with its reason.
	c, err := q.Claim(ctx, b)
	require.NoError(t, err)
	waited := make(chan Record, 1)
	go func() {
		r, err := q.Wait(ctx, two.OrderID, wait)
		assert.NoError(t, err)
		waited <- r
	}()
	require.Eventually(t, func() bool { return listening(q, two.OrderID) }, wait/2, time.Millisecond, "the wait never listened")
	_, err = q.Reject(ctx, c, map[string]string{two.OrderID: "sold_out"})
	require.NoError(t, err)
	r = <-waited
	assert.Equal(t, Rejected, r.State)
	assert.Equal(t, "sold_out", r.Reason)

	for _, bad := range []string{"*", ">", "a b", "a.*", ".a"} {
		_, err = q.Wait(ctx, bad, 200*time.Millisecond)
		require.ErrorIs(t, err, ErrNotFound, "%q is no record's key, nor a subscription's wildcard", bad)
	}
}

// TestEmbeddedKeepsOrders: the embedded server keeps its queue in the data directory: orders
// queued before a restart are there after it.
func TestEmbeddedKeepsOrders(t *testing.T) {
	cfg := testConfig(Config{DataDir: t.TempDir()})
	ctx := ctxT(t)
	q, err := Open(ctx, cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	one := batch("a", "1")
	_, err = q.Publish(ctx, one)
	require.NoError(t, err)
	_, err = q.Record(ctx, BatchRecord{Batch: one, State: Queued})
	require.NoError(t, err)
	q.Close()

	q = open(t, cfg)
	b, err := q.Fetch(ctx, 10, time.Second)
	require.NoError(t, err)
	require.Len(t, b, 1)
	assert.Equal(t, []string{"1"}, users(b[0]))
	r, err := q.Get(ctx, one.Orders[0].OrderID)
	require.NoError(t, err)
	assert.Equal(t, Queued, r.State)
}

// TestClusterLosesANode: on a three-node JetStream cluster the stream and the records are kept
// on three replicas, and a node SIGKILLed mid-sale loses no order: publishes go on (a retry with
// the same id while the stream elects a new leader), and every order is delivered exactly once.
func TestClusterLosesANode(t *testing.T) {
	servers := startServers(t, 3)
	cfg := testConfig(Config{URLs: natsserver.URLs(servers...)})
	q := open(t, cfg)
	ctx := ctxT(t)
	info, err := q.stream.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, info.Config.Replicas, "replicas follow the cluster's size")

	publish := func(from, to int) {
		for i := from; i < to; i++ {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := q.Publish(pctx, batch("a", fmt.Sprint(i)))
			cancel()
			require.NoError(t, err, "order %d", i)
		}
	}
	publish(0, 20)
	leader := info.Cluster.Leader
	for _, s := range servers {
		if s.Name == leader {
			s.Kill()
		}
	}
	publish(20, 40)

	seen := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < 40 && time.Now().Before(deadline) {
		b, err := q.Fetch(ctx, 50, time.Second)
		if err != nil {
			continue // the consumer's leader moving
		}
		for _, tk := range b {
			for _, d := range tk.Deliveries {
				for _, u := range users(Taken{Deliveries: []*Delivery{d}}) {
					seen[u]++
				}
				require.NoError(t, d.Ack())
			}
		}
	}
	assert.Len(t, seen, 40, "every order, after the stream leader %s was killed", leader)
	for id, n := range seen {
		assert.Equal(t, 1, n, "order %s delivered once", id)
	}
}

// TestSubject: one token per SKU, dots and all; the contract's subject by default.
func TestSubject(t *testing.T) {
	q := &Queue{}
	q.cfg.named()
	for _, sku := range []string{"iphone-17", "a.b", ".a", "a..b.", "A_9"} {
		s := q.Subject(sku)
		assert.Equal(t, 3, len(strings.Split(s, ".")), s)
		assert.Equal(t, sku, q.skuOf(s))
	}
	assert.Equal(t, "seckill.orders.iphone-17", q.Subject("iphone-17"))
	assert.Equal(t, "SECKILL_ORDERS", q.cfg.Stream)
}

// TestWorkInProgress: a writer whose commit is slow keeps its orders (no second writer gets them
// past AckWait), while the orders of a writer that stopped go to the other within AckWait and
// are counted as redelivered. Each second writer starts once the first has taken the order.
func TestWorkInProgress(t *testing.T) {
	backends(t, Config{AckWait: 600 * time.Millisecond}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		_, err := q.Publish(ctx, batch("a", "slow"))
		require.NoError(t, err)

		var (
			mu   sync.Mutex
			seen = map[string][]string{} // buyer -> the writers its order reached
		)
		reached := func(id, writer string) func() bool {
			return func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(seen[id], writer)
			}
		}
		// writer records the orders it takes, does its work, then acks them unless answer is false.
		writer := func(name string, work func(), answer bool) func(ctx context.Context, tk Taken) {
			return func(ctx context.Context, tk Taken) {
				mu.Lock()
				for _, u := range users(tk) {
					seen[u] = append(seen[u], name)
				}
				mu.Unlock()
				work()
				for _, d := range tk.Deliveries {
					if answer {
						assert.NoError(t, d.Ack())
					}
				}
			}
		}
		// The slow commit: the fault, three AckWaits and more long.
		slowCommit := func() { time.Sleep(2 * time.Second) }
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { q.Work(wctx, 10, 100*time.Millisecond, 10*time.Second, writer("slow", slowCommit, true)) })
		require.Eventually(t, reached("slow", "slow"), 10*time.Second, 5*time.Millisecond, "the slow writer never took the order")
		wg.Go(func() { q.Work(wctx, 10, 100*time.Millisecond, 10*time.Second, writer("other", func() {}, true)) })
		require.Eventually(t, func() bool {
			b, err := q.BacklogOf(ctx, "a")
			return err == nil && b.Depth == 0
		}, 10*time.Second, 10*time.Millisecond, "the slow writer never acked its order")
		stop()
		wg.Wait()
		assert.Equal(t, []string{"slow"}, seen["slow"], "held in progress for 2 s past an AckWait of 0.6 s")
		assert.Zero(t, testutil.ToFloat64(q.orders.WithLabelValues("redelivered")))

		_, err = q.Publish(ctx, batch("a", "lost"))
		require.NoError(t, err)
		wctx, stop = context.WithCancel(ctx)
		defer stop()
		// A writer that takes the order and never answers it: as if it were killed — its handle
		// returns, its loop ends, and nothing reports the order in progress any more.
		killed, kill := context.WithCancel(ctx)
		wg.Go(func() { q.Work(killed, 10, 100*time.Millisecond, 10*time.Second, writer("stopped", kill, false)) })
		require.Eventually(t, reached("lost", "stopped"), 10*time.Second, 5*time.Millisecond, "the stopped writer never took the order")
		wg.Go(func() { q.Work(wctx, 10, 100*time.Millisecond, 10*time.Second, writer("other", func() {}, true)) })
		require.Eventually(t, reached("lost", "other"), 5*time.Second, 20*time.Millisecond, "the stopped writer's order reaches the other")
		stop()
		wg.Wait()
		assert.GreaterOrEqual(t, testutil.ToFloat64(q.orders.WithLabelValues("redelivered")), 1.0)
		assert.Equal(t, 1.0+1, testutil.ToFloat64(q.orders.WithLabelValues("accepted")))
	})
}

// TestBacklogMetrics: the depth and the oldest order's age of each product, read at the scrape:
// the age is the scrape's time less the oldest order's, within the scrape's own duration.
func TestBacklogMetrics(t *testing.T) {
	backends(t, Config{}, func(t *testing.T, q *Queue) {
		ctx := ctxT(t)
		reg := prometheus.NewPedanticRegistry()
		q.register(reg)
		for _, u := range []string{"1", "2"} {
			_, err := q.Publish(ctx, batch("a", u))
			require.NoError(t, err)
		}
		b, err := q.BacklogOf(ctx, "a")
		require.NoError(t, err)
		gathering := time.Now()
		families, err := reg.Gather()
		require.NoError(t, err)
		gathered := time.Now()
		values := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if m.GetGauge() != nil {
					values[f.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		assert.Equal(t, 2.0, values["seckill_queue_depth/a"])
		age := values["seckill_queue_oldest_age_seconds/a"]
		assert.GreaterOrEqual(t, age, gathering.Sub(b.Oldest).Seconds(), "the oldest order's age at the scrape")
		assert.LessOrEqual(t, age, gathered.Sub(b.Oldest).Seconds(), "the oldest order's age at the scrape")
	})
}

// TestEmbeddedShared: instances on one data dir share its embedded server — the first runs it,
// the others connect to it — so they share one queue, as they share the data dir's database,
// and no two servers ever write one store. When the first stops, the next to start takes over
// the store and its orders.
func TestEmbeddedShared(t *testing.T) {
	cfg := testConfig(Config{DataDir: t.TempDir()})
	ctx := ctxT(t)
	first, err := Open(ctx, cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	second := open(t, cfg)
	require.NotNil(t, first.embedded)
	assert.Nil(t, second.embedded, "the second instance runs no server of its own")
	_, err = first.Publish(ctx, batch("a", "1"))
	require.NoError(t, err)
	b, err := second.Fetch(ctx, 10, time.Second)
	require.NoError(t, err)
	require.Len(t, b, 1, "one queue")
	require.NoError(t, b[0].Deliveries[0].Nak(0))
	first.Close()

	third := open(t, cfg)
	require.NotNil(t, third.embedded, "the store's lock passed on")
	// The nak may not have reached the store before its server stopped: then the order comes
	// back once its AckWait passes, not at once.
	b = fetchAll(t, third, 1)
	assert.Equal(t, []string{"1"}, users(b[0]), "the queued order survived its server")
}

// TestRestartBehindConsumer: a server that restarts behind its consumer — its store lost the
// last messages, the consumer's state kept them as delivered and acked — hands out the messages
// stored after the restart, though it gives their sequences out again. nats-server 2.9 passed
// over them (they would have waited for ever, and the queue once took them up from the stream by
// hand); the version the service embeds and a deployment needs does not. The loss is made as a
// crash makes it: the stream's message files removed while the server is down.
func TestRestartBehindConsumer(t *testing.T) {
	srv := startServers(t, 1)[0]
	cfg := testConfig(Config{URLs: []string{srv.URL}, AckWait: 500 * time.Millisecond})
	q := open(t, cfg)
	ctx := ctxT(t)
	behind := func(buyers ...string) {
		t.Helper()
		for _, u := range buyers {
			_, err := q.Publish(ctx, batch("a", u))
			require.NoError(t, err)
		}
		for _, b := range fetchAll(t, q, len(buyers)) {
			for _, d := range b.Deliveries {
				require.NoError(t, d.Ack())
			}
		}
		require.Eventually(t, func() bool {
			c, err := q.consumer.Info(ctx)
			return err == nil && c.NumAckPending == 0
		}, 5*time.Second, 20*time.Millisecond)
		// Stopped cleanly, so that the consumer's state has the acks; the messages' files then go,
		// as the writes a SIGKILL caught in the server's buffers would.
		srv.Stop()
		msgs, err := filepath.Glob(filepath.Join(srv.Dir, "jetstream", "*", "streams", cfg.Stream, "msgs", "*"))
		require.NoError(t, err)
		require.NotEmpty(t, msgs, "the stream's message files")
		for _, f := range msgs {
			require.NoError(t, os.Remove(f))
		}
		require.NoError(t, srv.Start())
	}
	behind("1", "2", "3")
	require.Eventually(t, func() bool {
		_, err := q.Publish(ctx, batch("a", "4"))
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "the restarted server takes an order")
	b := fetchAll(t, q, 1)
	assert.Equal(t, []string{"4"}, users(b[0]), "the batch stored behind the consumer's floor is handed out")
}
