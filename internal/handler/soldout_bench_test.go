package handler_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
)

// BenchmarkSoldOutAnswer is the hot path of a flash sale: an order for a product this instance
// has flagged sold out, answered 409 from memory through the whole handler stack as cmd/api
// builds it (request id, metrics, recovery, body limit, the buyer door with identity off,
// decoding and validation, the service's checks, the error's encoding). Each goroutine reuses
// its request and response writer, so allocs/op counts the stack's own. The flag is trusted
// for a minute here, so that its once-a-second recheck (a Redis call) does not blur the
// answer's cost.
func BenchmarkSoldOutAnswer(b *testing.B) {
	cfg := service.Defaults()
	cfg.SoldOutFlag = time.Minute
	srv := newServerOn(b, cfg, backendtest.Wiring{})
	sku := backendtest.SKU(b)
	put := httptest.NewRecorder()
	srv.ServeHTTP(put, putRequest(sku))
	require.Equal(b, http.StatusOK, put.Code, put.Body.String())
	const body = `{"user_id":"u-0123456789","quantity":1}`
	flagged := func() bool {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return flagRejections(rec.Body.String()) > 0
	}
	require.Eventually(b, func() bool {
		w := newDiscardWriter()
		srv.ServeHTTP(w, orderRequest(sku, body))
		return w.status == http.StatusConflict && flagged()
	}, 5*time.Second, 10*time.Millisecond, "the instance never flagged %s", sku)

	var wrong atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, w := orderRequest(sku, body), newDiscardWriter()
		rewind := req.Body.(*rewindBody)
		for pb.Next() {
			rewind.Reset(body)
			req.Body = rewind // the body limit wraps it
			w.reset()
			srv.ServeHTTP(w, req)
			if w.status != http.StatusConflict {
				wrong.Add(1)
			}
		}
	})
	b.StopTimer()
	require.Zero(b, wrong.Load(), "answers other than 409 sold_out")
}

func putRequest(sku string) *http.Request {
	req := httptest.NewRequest(http.MethodPut, productPath(sku), strings.NewReader(`{"name":"bench","stock":0}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	return req
}

// orderRequest is a buyer's order as the load tool sends it, with a body that can be rewound.
func orderRequest(sku, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, ordersPath(sku), nil)
	req.Body = &rewindBody{Reader: strings.NewReader(body)}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "bench-0123456789abcdef")
	return req
}

// rewindBody is a request body the benchmark reads again for every request.
type rewindBody struct{ *strings.Reader }

func (*rewindBody) Close() error { return nil }

// discardWriter is a response writer that keeps the status and drops the body, reused from
// request to request.
type discardWriter struct {
	header http.Header
	status int
}

func newDiscardWriter() *discardWriter { return &discardWriter{header: http.Header{}} }

func (w *discardWriter) reset() {
	clear(w.header)
	w.status = 0
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// flagRejections reads seckill_sold_out_flag_rejections_total from a /metrics page.
func flagRejections(page string) float64 {
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "seckill_sold_out_flag_rejections_total "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return 0
}
