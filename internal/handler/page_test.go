package handler

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/stock"
)

// listing is the Sales of a deployment with the products it lists; the rest is not asked.
type listing struct {
	Sales
	products []stock.Product
}

func (l listing) Products(context.Context, int) ([]stock.Product, error) { return l.products, nil }

func indexOf(t *testing.T, products ...stock.Product) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := New(Config{Sales: listing{products: products}, Log: slog.New(slog.DiscardHandler), Registerer: reg, Gatherer: reg})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:8080/", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	return rec.Body.String()
}

// TestIndex: / links every product to its page; with none it says how to start a sale, with
// the admin token to paste.
func TestIndex(t *testing.T) {
	empty := indexOf(t)
	assert.Contains(t, empty, "No product yet")
	assert.Contains(t, empty, "curl -X PUT http://localhost:8080/api/v1/products/demo")
	assert.Contains(t, empty, "Authorization: Bearer &lt;admin token&gt;")

	starts := time.Now().Add(time.Hour).UTC()
	page := indexOf(t, stock.Product{SKU: "iphone-17", Name: "iPhone 17", InitialStock: 100, Stock: 42},
		stock.Product{SKU: "case-17", Name: "Case", InitialStock: 5, Stock: 5, Window: stock.Window{Starts: starts}})
	assert.Contains(t, page, `<a href="/sale/iphone-17">iPhone 17</a>`)
	assert.Contains(t, page, "42 of 100")
	assert.Contains(t, page, `<a href="/sale/case-17">Case</a>`)
	assert.Contains(t, page, "Not on sale yet")
	assert.NotContains(t, page, "No product yet")
}
