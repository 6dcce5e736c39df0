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

// section places a batch of orders in one critical section and answers each.
type section func(s *stock.Store, reqs []stock.OrderRequest) ([]stock.Placed, error)

// BenchmarkCriticalSection measures each strategy's database critical section on one hot row,
// one order per section (batch=1) and with group commit (batch=64: 64 orders per transaction) —
// the same function either way — serially (the floor of one writer) and from parallel
// goroutines (what contention costs without a lock in front). ns/op is per order in both, so
// the two read side by side:
//
//	SECKILL_TEST_REQUIRE_BACKENDS=1 go test -run '^$' -bench CriticalSection -benchtime 2000x ./internal/stock
func BenchmarkCriticalSection(b *testing.B) {
	benchSections(b, []*stock.Store{backendtest.Store(b)})
}

// BenchmarkGaleraSections is BenchmarkCriticalSection on a three-node Galera cluster (named
// apart, so that make bench needs no cluster): serially on one node (one writer, each COMMIT
// certified by the whole cluster), and in parallel from goroutines spread over the nodes, where
// contention is settled by certification at COMMIT (lost/op counts the 1213s with the other
// losses).
func BenchmarkGaleraSections(b *testing.B) {
	g := backendtest.GaleraCluster(b)
	benchSections(b, []*stock.Store{g.Store(b, 0), g.Store(b, 1), g.Store(b, 2)})
}

// benchSections runs every section, both batch sizes, serially and in parallel, on stores: the
// serial writer on the first, the parallel ones taking them in turn.
func benchSections(b *testing.B, stores []*stock.Store) {
	ctx := context.Background()
	sections := map[string]section{
		"rowlock": func(s *stock.Store, reqs []stock.OrderRequest) ([]stock.Placed, error) {
			return s.PlaceLocked(ctx, []string{reqs[0].SKU}, stock.WaitForRow, func() []stock.CheckoutRequest { return orders(reqs...) })
		},
		"version": func(s *stock.Store, reqs []stock.OrderRequest) ([]stock.Placed, error) {
			reads, err := s.Reads(ctx, []string{reqs[0].SKU})
			if err != nil {
				return nil, err
			}
			return s.PlaceAt(ctx, orders(reqs...), reads)
		},
		"fenced": func(s *stock.Store, reqs []stock.OrderRequest) ([]stock.Placed, error) {
			return s.PlaceFenced(ctx, orders(reqs...), map[string]stock.Token{reqs[0].SKU: {Fence: stock.EtcdFence, Value: 1}}, noPause)
		},
	}
	for _, name := range []string{"rowlock", "version", "fenced"} {
		for _, batch := range []int{1, 64} {
			for _, parallel := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/batch=%d/parallel=%v", name, batch, parallel), func(b *testing.B) {
					benchSection(b, stores, sections[name], name, batch, parallel)
				})
			}
		}
	}
}

func benchSection(b *testing.B, stores []*stock.Store, place section, name string, batch int, parallel bool) {
	ctx := context.Background()
	s := stores[0]
	sku := backendtest.SKU(b)
	if _, err := s.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "bench", Stock: 1 << 30, MaxPerOrder: 1}); err != nil {
		b.Fatal(err)
	}
	var (
		n, failed atomic.Int64
		mu        sync.Mutex
		placed    []stock.Order
	)
	flush := func(s *stock.Store, reqs []stock.OrderRequest) {
		res, err := place(s, reqs)
		mu.Lock()
		defer mu.Unlock()
		for i := range reqs {
			if err != nil || res[i].Err != nil {
				failed.Add(1) // busy or a version conflict under contention: a lost attempt
				continue
			}
			placed = append(placed, res[i].Checkout.Lines[0])
		}
	}
	next := func() stock.OrderRequest {
		return stock.OrderRequest{SKU: sku, UserID: fmt.Sprintf("u%09d", n.Add(1)), Quantity: 1, Strategy: name}
	}
	var writers atomic.Int64
	run := func(more func() bool) {
		s := stores[int(writers.Add(1)-1)%len(stores)]
		reqs := make([]stock.OrderRequest, 0, batch)
		for more() {
			if reqs = append(reqs, next()); len(reqs) == batch {
				flush(s, reqs)
				reqs = reqs[:0]
			}
		}
		if len(reqs) > 0 {
			flush(s, reqs)
		}
	}
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
	} else {
		i := 0
		run(func() bool { i++; return i <= b.N })
	}
	b.StopTimer()
	b.ReportMetric(float64(failed.Load())/float64(b.N), "lost/op")
	backendtest.RequireInvariant(b, s, sku, placed)
}
