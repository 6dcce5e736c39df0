package handler

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	requestIDHeader = "X-Request-Id"
	ctxRequestID    = "seckill.request_id"
	ctxLogger       = "seckill.logger"
)

// A client-supplied request id is kept only when it is short and plain; otherwise a new one is
// made, so ids are safe to log and to echo.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// withRequestID gives every request an id (the client's X-Request-Id when it is sane), echoes it
// in the response, and keeps it with the service's logger in the context for logger.
func withRequestID(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader(requestIDHeader)
		if !requestIDPattern.MatchString(id) {
			id = ulid.Make().String()
		}
		c.Set(ctxRequestID, id)
		c.Set(ctxLogger, log) // the request's attributes are added in logger, only when it logs: most requests never do
		c.Header(requestIDHeader, id)
		c.Next()
	}
}

func requestID(c *gin.Context) string { return c.GetString(ctxRequestID) }

// logger is the request's logger: the service's, with the request id, method and path.
func logger(c *gin.Context) *slog.Logger {
	log := slog.Default()
	if l, ok := c.Get(ctxLogger); ok {
		log = l.(*slog.Logger)
	}
	return log.With(slog.String("request_id", requestID(c)), slog.String("method", c.Request.Method),
		slog.String("path", c.Request.URL.Path))
}

// withRecovery turns a panic into a logged 500 in the API's error shape.
func withRecovery() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				logger(c).Error("panic", "panic", r, "stack", string(debug.Stack()))
				fail(c, errPanic, "")
			}
		}()
		c.Next()
	}
}

// httpMetrics counts requests and their latency by route template and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

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
		status := strconv.Itoa(c.Writer.Status())
		m.requests.WithLabelValues(c.Request.Method, route, status).Inc()
		m.latency.WithLabelValues(c.Request.Method, route, status).Observe(time.Since(start).Seconds())
	}
}

// adminCheck returns the check of the admin bearer token: true for the right one, false for a
// request without an Authorization header, errUnauthenticated for anything else. Both sides are
// hashed before the constant-time compare, so neither the content nor the length of the token
// leaks through timing.
func adminCheck(token string) func(c *gin.Context) (bool, error) {
	want := sha256.Sum256([]byte(token))
	return func(c *gin.Context) (bool, error) {
		header := c.GetHeader("Authorization")
		if header == "" {
			return false, nil
		}
		got, ok := strings.CutPrefix(header, "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || token == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			c.Header("WWW-Authenticate", `Bearer realm="seckill admin"`)
			return false, errUnauthenticated
		}
		return true, nil
	}
}

// requireAdmin lets only requests with the admin token through.
func requireAdmin(isAdmin func(c *gin.Context) (bool, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		ok, err := isAdmin(c)
		if !ok {
			if err == nil {
				err = errUnauthenticated
				c.Header("WWW-Authenticate", `Bearer realm="seckill admin"`)
			}
			fail(c, err, "")
			return
		}
		c.Next()
	}
}

// limitBody caps request bodies; reading past the cap fails with *http.MaxBytesError.
func limitBody(n int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, n)
		c.Next()
	}
}
