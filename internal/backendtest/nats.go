package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/devserver/natsserver"
	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/orderqueue"
)

// The order queue of the queued strategy is NATS JetStream: SECKILL_TEST_NATS_URL, or a
// nats-server of the test process's own, at the version the service embeds (natsserver), started
// on first use and stopped by Main. Each test process has a queue of its own on it — its stream,
// records, consumer and subjects named for the process — shared by the process's instances, as a
// deployment's instances share one, and removed by Main (QueueOfItsOwn: another, for instances on
// another database).
var (
	natsOnce  sync.Once
	natsQueue orderqueue.Config
)

// NATSURL returns the test NATS server. With none to reach or start, the test is skipped — or
// fails with SECKILL_TEST_REQUIRE_BACKENDS=1 (as in CI).
func NATSURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("SECKILL_TEST_NATS_URL")
	if url == "" {
		return processNATSURL(t)
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.NoReconnect())
	if err == nil {
		nc.Close()
		return url
	}
	if Required() {
		t.Fatalf("NATS is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %s: %v", url, err)
	}
	t.Skipf("this test needs a NATS server with JetStream at %s: %v", url, err)
	return ""
}

// QueueConfig is the test process's order queue on the test NATS server, with a short AckWait,
// so that a stopped writer's orders move on quickly.
func QueueConfig(t testing.TB) orderqueue.Config {
	t.Helper()
	return processQueue(NATSURL(t))
}

// instanceQueue is the order queue of an instance on the test backends (AppConfig): the test
// process's, or — with no NATS server to reach or start, and none required — one embedded in
// the instance, in a directory of the test's, as cmd/api would start with SECKILL_NATS_URLS unset.
func instanceQueue(t testing.TB) orderqueue.Config {
	t.Helper()
	if os.Getenv("SECKILL_TEST_NATS_URL") == "" && natsserver.Available() != nil && !Required() {
		c := app.Defaults().Queue
		c.DataDir = t.TempDir()
		return c
	}
	return QueueConfig(t)
}

// QueueOn is the service's order queue on the NATS servers at urls, with a short AckWait, so
// that a stopped writer's orders move on quickly.
func QueueOn(urls ...string) orderqueue.Config {
	c := app.Defaults().Queue
	c.URLs, c.AckWait = urls, time.Second
	return c
}

func processQueue(url string) orderqueue.Config {
	natsOnce.Do(func() { natsQueue = namedQueue(url, "") })
	return natsQueue
}

// namedQueue is a queue on the NATS server at url named for the test process, and for suffix.
func namedQueue(url, suffix string) orderqueue.Config {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := fmt.Sprintf("T%d_%s%s", os.Getpid(), strings.ToUpper(hex.EncodeToString(b)), suffix)
	c := QueueOn(url)
	c.Stream, c.Bucket, c.Consumer, c.Subjects = "ORDERS_"+id, "RECORDS_"+id, "writers_"+id, "test."+id+".orders"
	c.MaxBytes = 16 << 20
	queuesMu.Lock()
	queues = append(queues, c)
	queuesMu.Unlock()
	return c
}

// The queues of the test process, which Main removes.
var (
	queuesMu sync.Mutex
	queues   []orderqueue.Config
)

// QueueOfItsOwn is a queue on the test NATS server for the instances of a database of their own
// (a Galera cluster): the test process's queue is every instance's in the process, and another
// database's writers would take its orders and find no such product.
func QueueOfItsOwn(t testing.TB, name string) orderqueue.Config {
	t.Helper()
	return namedQueue(NATSURL(t), "_"+name)
}

// OpenQueue opens cfg's order queue for one instance, with a connection of its own and its
// metrics in reg; it is closed in t.Cleanup.
func OpenQueue(t testing.TB, cfg orderqueue.Config, reg prometheus.Registerer) *orderqueue.Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := orderqueue.Open(ctx, cfg, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	t.Cleanup(q.Close)
	return q
}

// dropQueue removes the test process's queues from the server.
func dropQueue() {
	queuesMu.Lock()
	defer queuesMu.Unlock()
	for _, q := range queues {
		drop(q)
	}
}

func drop(q orderqueue.Config) {
	nc, err := nats.Connect(q.URLs[0], nats.Timeout(2*time.Second), nats.NoReconnect())
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, q.Stream)
	_ = js.DeleteKeyValue(ctx, q.Bucket)
}

// The test process's own NATS server. A service process (Env) names the contract's stream and
// subjects, which two test processes on one server would share: it is given this one too, even
// where SECKILL_TEST_NATS_URL names another.
var (
	ownNATSOnce sync.Once
	ownNATS     *natsserver.Server
	ownNATSDir  string
	ownNATSErr  error
)

// processNATSURL returns the URL of the test process's own NATS server. Where it cannot be built
// (no Go toolchain) the test is skipped — or fails with SECKILL_TEST_REQUIRE_BACKENDS=1.
func processNATSURL(t testing.TB) string {
	t.Helper()
	if err := natsserver.Available(); err != nil {
		if Required() {
			t.Fatalf("nats-server is required (SECKILL_TEST_REQUIRE_BACKENDS=1): %v", err)
		}
		t.Skipf("this test needs nats-server: %v", err)
	}
	ownNATSOnce.Do(func() {
		if ownNATSDir, ownNATSErr = os.MkdirTemp("", "seckill-test-nats-"); ownNATSErr != nil {
			return
		}
		var servers []*natsserver.Server
		if servers, ownNATSErr = natsserver.New(ownNATSDir, 1); ownNATSErr != nil {
			return
		}
		if ownNATSErr = natsserver.StartAll(servers); ownNATSErr == nil {
			ownNATS = servers[0]
		}
	})
	require.NoError(t, ownNATSErr, "the test process's NATS server")
	return ownNATS.URL
}

func stopProcessNATS() {
	if ownNATS != nil {
		ownNATS.Kill()
	}
	if ownNATSDir != "" {
		_ = os.RemoveAll(ownNATSDir)
	}
}
