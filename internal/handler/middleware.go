package handler

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/stock"
)

const requestIDHeader = "X-Request-Id"

// withRequestID gives every request an id (the client's X-Request-Id when it is sane) and echoes
// it in the response, where requestID reads it back: nothing is stored per request. After the
// request it logs the 5xx that fail answered, with the id: those are ours to fix.
func withRequestID(log *slog.Logger) gin.HandlerFunc {
	ids := &requestIDs{}
	_, _ = rand.Read(ids.entropy[:]) // never fails (crypto/rand)
	return func(c *gin.Context) {
		// A client's id is kept only when short and plain, so that it is safe to log and to echo.
		id := c.GetHeader(requestIDHeader)
		if !plainName(id, "._:-") {
			id = ids.next()
		}
		c.Header(requestIDHeader, id)
		c.Next()
		if status := c.Writer.Status(); status >= http.StatusInternalServerError {
			for _, e := range c.Errors {
				requestLogger(log, c).LogAttrs(c.Request.Context(), slog.LevelError, "request failed",
					slog.Int("status", status), slog.String("code", stock.Code(e.Err)), slog.Any("err", e.Err))
			}
		}
	}
}

// requestIDs makes ULIDs without a random read or a lock per request: the entropy is drawn once,
// and each id adds a counter to it. Ids stay unique in the process (the counter) and across
// instances (the entropy); they need not be unpredictable, only distinct.
type requestIDs struct {
	entropy [10]byte
	n       atomic.Uint64
}

func (r *requestIDs) next() string {
	var id ulid.ULID
	_ = id.SetTime(ulid.Now()) // fails only past the year 10889
	copy(id[6:], r.entropy[:])
	low := binary.BigEndian.Uint64(id[8:]) + r.n.Add(1)
	binary.BigEndian.PutUint64(id[8:], low)
	return id.String()
}

// requestID is the request's id, as its response carries it.
func requestID(c *gin.Context) string { return c.Writer.Header().Get(requestIDHeader) }

// requestLogger is log with the request's id, method and path.
func requestLogger(log *slog.Logger, c *gin.Context) *slog.Logger {
	return log.With(slog.String("request_id", requestID(c)), slog.String("method", c.Request.Method),
		slog.String("path", c.Request.URL.Path))
}

// withRecovery turns a panic into a logged 500 in the API's error shape.
func withRecovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				requestLogger(log, c).Error("panic", "panic", r, "stack", string(debug.Stack()))
				fail(c, errPanic, "")
			}
		}()
		c.Next()
	}
}

// httpMetrics counts requests and their latency by route template and status. The observers of
// each label set are looked up once and kept (seen): a lookup hashes the labels, and every
// request would pay for it.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	seen     atomic.Pointer[map[httpLabels]httpObservers] // replaced, never changed: read without a lock
	adding   sync.Mutex                                   // one writer of seen at a time
}

type httpLabels struct {
	method, route string
	status        int
}

type httpObservers struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// maxHTTPLabelSets bounds the observers kept: a client can send any method, and past this many
// label sets the rest are looked up per request instead.
const maxHTTPLabelSets = 1024

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_http_requests_total", Help: "HTTP requests by method, route and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_http_request_duration_seconds", Help: "HTTP request latency by method, route and status.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"method", "route", "status"}),
	}
	m.seen.Store(&map[httpLabels]httpObservers{})
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *httpMetrics) middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched" // never the raw path: it would make label cardinality unbounded
		}
		o := m.observers(httpLabels{method: c.Request.Method, route: route, status: c.Writer.Status()})
		o.requests.Inc()
		o.latency.Observe(time.Since(start).Seconds())
	}
}

// observers are the request counter and latency histogram of l.
func (m *httpMetrics) observers(l httpLabels) httpObservers {
	if o, ok := (*m.seen.Load())[l]; ok {
		return o
	}
	status := strconv.Itoa(l.status)
	o := httpObservers{requests: m.requests.WithLabelValues(l.method, l.route, status),
		latency: m.latency.WithLabelValues(l.method, l.route, status)}
	m.adding.Lock()
	defer m.adding.Unlock()
	if seen := *m.seen.Load(); len(seen) < maxHTTPLabelSets {
		next := maps.Clone(seen)
		next[l] = o
		m.seen.Store(&next)
	}
	return o
}

// isAdmin reports whether the request carries the admin bearer token: false without an
// Authorization header, errUnauthenticated for any other. Both sides are hashed before the
// constant-time compare, so neither the content nor the length of the token leaks through timing.
func (h *handler) isAdmin(c *gin.Context) (bool, error) {
	header := c.GetHeader("Authorization")
	if header == "" {
		return false, nil
	}
	got, ok := strings.CutPrefix(header, "Bearer ")
	sum := sha256.Sum256([]byte(got))
	if !ok || h.AdminToken == "" || subtle.ConstantTimeCompare(sum[:], h.adminSum[:]) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="seckill admin"`)
		return false, errUnauthenticated
	}
	return true, nil
}

// requireAdmin lets only requests with the admin token through.
func (h *handler) requireAdmin(c *gin.Context) {
	if ok, err := h.isAdmin(c); !ok {
		c.Header("WWW-Authenticate", `Bearer realm="seckill admin"`)
		fail(c, cmp.Or[error](err, errUnauthenticated), "")
	}
}
