package stock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// BenchmarkCriticalSection measures each strategy's database critical section, one order per
// operation, on one hot row: serially (the floor of one writer) and from parallel goroutines
// (what contention costs). It is the per-order figure that group commit (issue 6) is measured
// against:
//
//	SECKILL_TEST_REQUIRE_BACKENDS=1 go test -run '^$' -bench CriticalSection -benchtime 2000x ./internal/stock
func BenchmarkCriticalSection(b *testing.B) {
	ctx := context.Background()
	sections := map[string]func(s *stock.Store, req stock.OrderRequest) (stock.Order, error){
		"nowait": func(s *stock.Store, req stock.OrderRequest) (stock.Order, error) {
			return s.PlaceOrderNowait(ctx, req)
		},
		"version": func(s *stock.Store, req stock.OrderRequest) (stock.Order, error) {
			p, err := s.Product(ctx, req.SKU)
			if err != nil {
				return stock.Order{}, err
			}
			return s.PlaceOrderAt(ctx, req, p)
		},
		"fenced": func(s *stock.Store, req stock.OrderRequest) (stock.Order, error) {
			return s.PlaceOrderFenced(ctx, req, 1)
		},
	}
	for _, name := range []string{"nowait", "version", "fenced"} {
		section := sections[name]
		for _, parallel := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/parallel=%v", name, parallel), func(b *testing.B) {
				s := backendtest.Store(b)
				sku := backendtest.SKU(b)
				_, err := s.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "bench", Stock: 1 << 30, MaxPerOrder: 1})
				if err != nil {
					b.Fatal(err)
				}
				var (
					n, failed atomic.Int64
					mu        sync.Mutex
					placed    []stock.Order
				)
				order := func() {
					req := stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("u%09d", n.Add(1)), Quantity: 1, Strategy: name}
					o, err := section(s, req)
					if err != nil {
						failed.Add(1) // busy or a version conflict under contention: a lost attempt
						return
					}
					mu.Lock()
					placed = append(placed, o)
					mu.Unlock()
				}
				b.ResetTimer()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							order()
						}
					})
				} else {
					for range b.N {
						order()
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(failed.Load())/float64(b.N), "lost/op")
				backendtest.RequireInvariant(b, s, sku, placed)
			})
		}
	}
}
