package handler_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
)

// stream is one watcher of a product's events over HTTP: the data of each stock event, in order.
type stream struct {
	events chan string
	resp   *http.Response
}

// watch opens a product's event stream at url; it fails the test unless the answer is 200.
func watch(t testing.TB, ctx context.Context, url string) *stream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &stream{events: make(chan string, 64), resp: resp}
	go func() {
		defer close(s.events)
		lines := bufio.NewScanner(resp.Body)
		event := ""
		for lines.Scan() {
			switch line := lines.Text(); {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "stock":
				s.events <- strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

// next is the stream's next event, or "" when it ended.
func (s *stream) next(t testing.TB) string {
	t.Helper()
	select {
	case e := <-s.events:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return ""
	}
}

func eventsPath(sku string) string { return "/api/v1/products/" + sku + "/events" }

// TestEvents: a product's stream sends its figures on connect and each change, upcoming before
// the start; an unknown product is 404, a malformed SKU 400.
func TestEvents(t *testing.T) {
	s := newServer(t)
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 2, 1)
	w := watch(t, t.Context(), srv.URL+eventsPath(sku))
	assert.JSONEq(t, `{"stock":2,"sold":0,"state":"open"}`, w.next(t))
	s.order(t, sku, `{"user_id":"u-1"}`, nil)
	assert.JSONEq(t, `{"stock":1,"sold":1,"state":"open"}`, w.next(t))
	s.order(t, sku, `{"user_id":"u-2"}`, nil)
	assert.JSONEq(t, `{"stock":0,"sold":2,"state":"sold_out"}`, w.next(t))

	later := backendtest.SKU(t)
	rec := s.do(t, http.MethodPut, productPath(later), fmt.Sprintf(`{"name":"x","stock":5,"starts_at":%q}`,
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), admin)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"stock":5,"sold":0,"state":"upcoming"}`, watch(t, t.Context(), srv.URL+eventsPath(later)).next(t))

	assertError(t, s.do(t, http.MethodGet, eventsPath(backendtest.SKU(t)), "", nil), http.StatusNotFound, "not_found")
	assertError(t, s.do(t, http.MethodGet, eventsPath("no%20such"), "", nil), http.StatusBadRequest, "invalid_argument")
}

// TestEventsCapped: past SECKILL_EVENTS_MAX streams an instance answers 503 unavailable with
// Retry-After; a stream that ends makes room for another.
func TestEventsCapped(t *testing.T) {
	s := newServerOn(t, service.Defaults(), backendtest.Wiring{}, func(c *app.Config) { c.EventsMax = 2 })
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 2, 1)
	first, cancel := context.WithCancel(t.Context())
	watch(t, first, srv.URL+eventsPath(sku)).next(t)
	watch(t, t.Context(), srv.URL+eventsPath(sku)).next(t)
	rec := s.do(t, http.MethodGet, eventsPath(sku), "", nil)
	assertError(t, rec, http.StatusServiceUnavailable, "unavailable")
	assertRetryAfter(t, rec)
	cancel()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(srv.URL + eventsPath(sku))
		require.NoError(c, err)
		defer resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode, "the ended stream made room")
	}, 5*time.Second, 20*time.Millisecond)
}

// manyWatchers is how many watchers TestEventsOneFeedForManyWatchers opens on one instance.
const manyWatchers = 1000

// TestEventsOneFeedForManyWatchers: a thousand watchers of one product on one instance cost the
// database what one watcher costs — one feed reads the row for all of them — and every one of
// them sees sold_out within a second of the last sale.
func TestEventsOneFeedForManyWatchers(t *testing.T) {
	s := newServer(t)
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(srv.Close)
	one := sellOutWatched(t, s, srv.URL, 1)
	many := sellOutWatched(t, s, srv.URL, manyWatchers)
	t.Logf("statements sent while watched and sold out: %d with one watcher, %d with %d", one, many, manyWatchers)
	// The feed's ticks and the instance's own loops (heartbeats, expiry) run for as long as a
	// round lasts, and a round of a thousand lasts a little longer: a few statements. A read
	// for each watcher would be a thousand at least.
	assert.LessOrEqual(t, many, one+manyWatchers/50,
		"%d watchers cost the database %d statements where one costs %d: the events read it for each watcher", manyWatchers, many, one)
}

// sellOutWatched opens n watchers of a new product of 3 units, sells it out and returns the
// statements the instance's store sent meanwhile; every watcher must see sold_out within a
// second of the last sale.
func sellOutWatched(t *testing.T, s *server, url string, n int) int64 {
	t.Helper()
	sku := backendtest.SKU(t)
	s.putProduct(t, sku, 3, 1)
	before := s.store.Statements()
	var (
		opened, soldOut sync.WaitGroup
		mu              sync.Mutex
		lastSeen        time.Time // when the last watcher saw sold_out
		clients         = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	)
	t.Cleanup(clients.CloseIdleConnections)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opened.Add(n)
	soldOut.Add(n)
	failed := make(chan error, n)
	for range n {
		go func() {
			defer soldOut.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+eventsPath(sku), nil)
			resp, err := clients.Do(req)
			if err != nil {
				opened.Done()
				failed <- err
				return
			}
			defer resp.Body.Close()
			lines, first := bufio.NewScanner(resp.Body), true
			for lines.Scan() {
				if !strings.HasPrefix(lines.Text(), "data: ") {
					continue
				}
				if first {
					first = false
					opened.Done()
				}
				if strings.Contains(lines.Text(), `"state":"sold_out"`) {
					now := time.Now()
					mu.Lock()
					if now.After(lastSeen) {
						lastSeen = now
					}
					mu.Unlock()
					return
				}
			}
			if first {
				opened.Done()
			}
			failed <- fmt.Errorf("stream ended before sold_out: %v", lines.Err())
		}()
	}
	opened.Wait()
	var lastSale time.Time
	for i := range 3 {
		s.order(t, sku, fmt.Sprintf(`{"user_id":"u-%d"}`, i), nil)
		lastSale = time.Now()
	}
	soldOut.Wait()
	spent := s.store.Statements() - before
	close(failed)
	for err := range failed {
		assert.NoError(t, err, "one of %d watchers", n)
		break
	}
	late := lastSeen.Sub(lastSale)
	assert.Less(t, late, time.Second, "the last of %d watchers saw sold_out %s after the last sale", n, late)
	return spent
}
