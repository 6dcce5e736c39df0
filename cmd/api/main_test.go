package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

func TestMain(m *testing.M) { backendtest.Main(m, removeService) }

// instance is one running instance of the API, in this process (run) or in a child process.
type instance struct {
	url, token string
	pid        int         // of a child process; 0 in this process
	kill       func()      // SIGKILLs a child process
	log        *processLog // of a child process: what it wrote to stderr
}

// watchOutput scans a service's stdout for its address and admin token, and keeps draining it.
func watchOutput(t *testing.T, r io.Reader) <-chan instance {
	t.Helper()
	found := make(chan instance, 1)
	go func() {
		var svc instance
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if tok, ok := strings.CutPrefix(line, "admin token (generated, shown once): "); ok {
				svc.token = tok
			}
			if url, ok := strings.CutPrefix(line, "listening on "); ok {
				svc.url = url
				found <- svc
			}
		}
	}()
	return found
}

// startRun starts run in this process with the given environment. The returned stop cancels
// it, as SIGTERM would, and returns what run returned.
func startRun(t *testing.T, vars map[string]string) (instance, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	found := watchOutput(t, pr)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, env(vars), pw, io.Discard)
		_ = pw.Close()
	}()
	var svc instance
	select {
	case svc = <-found:
	case err := <-done:
		cancel()
		t.Fatalf("run exited at start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("run did not start listening in 30s")
	}
	if svc.token == "" {
		svc.token = vars["SECKILL_ADMIN_TOKEN"]
	}
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("run did not return 30s after cancel")
		}
	})
	t.Cleanup(func() { _ = stop() })
	return svc, stop
}

// call sends one JSON request with the admin token (backendtest.Call).
func (s instance) call(t require.TestingT, method, path, body string, out any) int {
	return backendtest.Call(t, s.url, s.token, method, path, body, out)
}

// TestRunEmbeddedDefault is the first README command: no configuration at all serves a working
// sale on the embedded store, prints the generated admin token once, and stops cleanly.
func TestRunEmbeddedDefault(t *testing.T) {
	dir := t.TempDir()
	svc, stop := startRun(t, map[string]string{"SECKILL_ADDR": "127.0.0.1:0", "SECKILL_DATA_DIR": dir})
	require.NotEmpty(t, svc.token, "the generated admin token is printed")

	assert.Equal(t, http.StatusOK, svc.call(t, "GET", "/readyz", "", nil))
	var p map[string]any
	require.Equal(t, http.StatusOK, svc.call(t, "PUT", "/api/v1/products/demo", `{"name":"Demo","stock":3}`, &p))
	var o map[string]any
	require.Equal(t, http.StatusCreated, svc.call(t, "POST", "/api/v1/products/demo/orders", `{"user_id":"u1"}`, &o))
	assert.Equal(t, "hybrid", o["strategy"])
	require.Equal(t, http.StatusCreated, svc.call(t, "POST", "/api/v1/products/demo/orders", `{"user_id":"u2","strategy":"dblock"}`, nil))
	require.Equal(t, http.StatusCreated, svc.call(t, "POST", "/api/v1/products/demo/orders", `{"user_id":"u3","strategy":"etcd"}`, nil),
		"the embedded etcd serves the etcd strategy")
	var audit map[string]any
	require.Equal(t, http.StatusOK, svc.call(t, "GET", "/api/v1/products/demo/audit", "", &audit))
	assert.Equal(t, true, audit["consistent"])
	assert.EqualValues(t, 0, audit["stock"])
	assert.EqualValues(t, 2, audit["redis_stock"], "the embedded Redis admission counter (only hybrid orders move it)")
	require.NoError(t, stop())
	assert.FileExists(t, filepath.Join(dir, "seckill.db"))
}

// TestGracefulShutdownDrains cancels run while an order is inside its critical section: the
// order completes and is answered 201 before run returns, and it is in the database. The order
// is naive's, whose section pauses between its read and its write (SECKILL_NAIVE_PAUSE): the
// section's length, long enough that the cancel lands inside it on a loaded machine. The cancel
// waits for the event, not a clock: the section has taken the order (seckill_batch_orders, on
// /metrics, counts a batch when its section takes it, before the read).
func TestGracefulShutdownDrains(t *testing.T) {
	dir := t.TempDir()
	svc, stop := startRun(t, map[string]string{
		"SECKILL_ADDR": "127.0.0.1:0", "SECKILL_DATA_DIR": dir, "SECKILL_ADMIN_TOKEN": "tok",
		"SECKILL_ALLOW_UNSAFE": "true", "SECKILL_NAIVE_PAUSE": "2s",
	})
	require.Equal(t, http.StatusOK, svc.call(t, "PUT", "/api/v1/products/drain", `{"name":"Drain","stock":1}`, nil))

	status := make(chan int, 1)
	var order map[string]any
	go func() {
		status <- svc.call(t, "POST", "/api/v1/products/drain/orders", `{"user_id":"u1","strategy":"naive"}`, &order)
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, scrape(c, []instance{svc}, `seckill_batch_orders_count{strategy="naive"}`))
	}, 30*time.Second, 5*time.Millisecond, "the order never reached its section")
	select {
	case s := <-status:
		t.Fatalf("the order was answered (%d) before the shutdown began: nothing was in flight to drain", s)
	default:
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	require.Equal(t, http.StatusCreated, <-status, "the in-flight order was answered")
	require.NoError(t, <-stopped)

	s, err := stock.OpenSQLite(context.Background(), filepath.Join(dir, "seckill.db"), app.Defaults().StoreOptions())
	require.NoError(t, err)
	defer s.Close()
	got, err := s.Order(context.Background(), order["order_id"].(string))
	require.NoError(t, err, "the acknowledged order is in the database")
	assert.Equal(t, "u1", got.UserID)
}

func TestRunRefusesBadConfig(t *testing.T) {
	err := run(context.Background(), nil, env(map[string]string{"SECKILL_STRATEGY": "nope", "SECKILL_DATA_DIR": t.TempDir(),
		"SECKILL_ADDR": "127.0.0.1:0"}), io.Discard, io.Discard)
	assert.ErrorContains(t, err, "unknown strategy")
	for _, unsafe := range []string{"naive", "unguarded-redis", "unguarded-etcd"} {
		err = run(context.Background(), nil, env(map[string]string{"SECKILL_STRATEGY": unsafe, "SECKILL_DATA_DIR": t.TempDir(),
			"SECKILL_ADDR": "127.0.0.1:0"}), io.Discard, io.Discard)
		assert.ErrorContains(t, err, "unsafe", "%s as the default needs SECKILL_ALLOW_UNSAFE", unsafe)
	}
	var out bytes.Buffer
	err = run(context.Background(), []string{"-lock-ttl", "x"}, env(nil), &out, io.Discard)
	assert.Error(t, err)
}

// TestServerEdges: the http.Server limits that protect the service from a client — a header
// over 16 KiB is refused with 431, and a client that never finishes its headers (slowloris) is
// cut off by ReadHeaderTimeout instead of holding a connection forever.
func TestServerEdges(t *testing.T) {
	svc, _ := startRun(t, map[string]string{"SECKILL_ADDR": "127.0.0.1:0", "SECKILL_DATA_DIR": t.TempDir(), "SECKILL_ADMIN_TOKEN": "tok"})

	req, err := http.NewRequest(http.MethodGet, svc.url+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Padding", strings.Repeat("x", 32<<10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	conn, err := net.Dial("tcp", strings.TrimPrefix(svc.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
	start := time.Now()
	_, err = io.ReadAll(conn)
	assert.NoError(t, err, "the server closed the connection (EOF), the client did not time out")
	assert.Less(t, time.Since(start), 10*time.Second, "cut off by the 5 s ReadHeaderTimeout")
}
