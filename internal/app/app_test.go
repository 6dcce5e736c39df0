package app_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/backendtest"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// call sends one request through h and returns the answer.
func call(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestOpenHonoursConfig: what the Config says reaches every part Open builds — the store's pool
// (SECKILL_DB_MAX_CONNS), the default strategy, the admin token, the backends readiness asks —
// so that a test or an experiment that changes a setting changes what cmd/api would.
func TestOpenHonoursConfig(t *testing.T) {
	c := backendtest.AppConfig(t)
	c.DBMaxConns = 3
	c.AdminToken = "tok"
	c.Service.Strategy = "dblock"
	a, err := app.Open(context.Background(), c, slog.New(slog.DiscardHandler), io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })

	assert.Equal(t, 3, a.Store().PoolStats().MaxOpenConnections, "the store's pool is the configured one")
	assert.Contains(t, a.Service().Names(), "etcd", "the configured etcd serves the etcd strategy")
	rec := call(a.Handler(), http.MethodGet, "/readyz", "")
	assert.Equal(t, http.StatusOK, rec.Code, "body: %s", rec.Body)
	assert.Contains(t, rec.Body.String(), `"etcd":"ok"`)

	sku := backendtest.SKU(t)
	rec = call(a.Handler(), http.MethodPut, "/api/v1/products/"+sku, `{"name":"x","stock":2}`)
	require.Equal(t, http.StatusOK, rec.Code, "the admin token is the configured one: %s", rec.Body)
	rec = call(a.Handler(), http.MethodPost, "/api/v1/products/"+sku+"/orders", `{"user_id":"u-1"}`)
	require.Equal(t, http.StatusCreated, rec.Code, "body: %s", rec.Body)
	assert.Contains(t, rec.Body.String(), `"strategy":"dblock"`, "the configured default strategy placed it")
}

// TestOpenWithStore: an instance on a store the caller opened runs on that store and leaves it
// open when it closes; a configuration the service refuses is an error from Open.
func TestOpenWithStore(t *testing.T) {
	store := backendtest.Store(t)
	a, err := app.Open(context.Background(), backendtest.AppConfig(t), slog.New(slog.DiscardHandler), io.Discard, app.WithStore(store))
	require.NoError(t, err)
	assert.Same(t, store, a.Store())
	require.NoError(t, a.Close())
	assert.NoError(t, store.Ping(context.Background()), "the caller's store is the caller's to close")

	c := backendtest.AppConfig(t)
	c.Service.Strategy = "nope"
	_, err = app.Open(context.Background(), c, slog.New(slog.DiscardHandler), io.Discard)
	assert.ErrorContains(t, err, "unknown strategy")
}

// TestShutdownEndsEventStreams: an instance told to stop ends its sale-page event streams at
// once, cleanly (the stream reaches its end), and its drain does not wait for them: Serve
// returns long before the shutdown timeout.
func TestShutdownEndsEventStreams(t *testing.T) {
	c := backendtest.AppConfig(t)
	c.AdminToken = "tok"
	c.ShutdownTimeout = 20 * time.Second
	a, err := app.Open(context.Background(), c, slog.New(slog.DiscardHandler), io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()

	sku := backendtest.SKU(t)
	require.Equal(t, http.StatusOK, call(a.Handler(), http.MethodPut, "/api/v1/products/"+sku, `{"name":"x","stock":2}`).Code)
	resp, err := http.Get("http://" + ln.Addr().String() + "/api/v1/products/" + sku + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	first := make([]byte, 64)
	_, err = resp.Body.Read(first)
	require.NoError(t, err)
	assert.Contains(t, string(first), "event: stock")

	stopped := time.Now()
	stop()
	_, err = io.ReadAll(resp.Body)
	assert.NoError(t, err, "the stream ends cleanly, not cut")
	select {
	case err := <-served:
		require.NoError(t, err)
		assert.Less(t, time.Since(stopped), c.ShutdownTimeout/2, "the drain waited for the event stream")
	case <-time.After(c.ShutdownTimeout):
		t.Fatal("Serve still draining at its shutdown timeout: it waits for the event stream")
	}
}
