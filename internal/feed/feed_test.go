package feed_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/feed"
	"github.com/flashsale/seckill/internal/stock"
)

// shelf is one product whose stock the test sets, read as a feed reads the store's row.
type shelf struct {
	mu sync.Mutex
	p  stock.Product
}

func (s *shelf) Product(_ context.Context, sku string) (stock.Product, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sku != s.p.SKU {
		return stock.Product{}, stock.ErrNotFound
	}
	return s.p, nil
}

func (s *shelf) sell() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.Stock--
}

func newHub(t *testing.T, products feed.Products, opts feed.Options) *feed.Hub {
	t.Helper()
	h := feed.New(products, opts, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	t.Cleanup(h.Close)
	return h
}

// TestOf: the state of a sale by its window and stock.
func TestOf(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	p := stock.Product{InitialStock: 10, Stock: 4}
	tests := []struct {
		name   string
		window stock.Window
		stock  int64
		want   feed.Figures
	}{
		{"open, no window", stock.Window{}, 4, feed.Figures{Stock: 4, Sold: 6, State: feed.Open}},
		{"before the start", stock.Window{Starts: now.Add(time.Second)}, 4, feed.Figures{Stock: 4, Sold: 6, State: feed.Upcoming}},
		{"at the start", stock.Window{Starts: now}, 4, feed.Figures{Stock: 4, Sold: 6, State: feed.Open}},
		{"sold out", stock.Window{}, 0, feed.Figures{Stock: 0, Sold: 10, State: feed.SoldOut}},
		{"at the end", stock.Window{Ends: now}, 4, feed.Figures{Stock: 4, Sold: 6, State: feed.Ended}},
		{"sold out and ended", stock.Window{Ends: now}, 0, feed.Figures{Stock: 0, Sold: 10, State: feed.SoldOut}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.Window, p.Stock = tt.window, tt.stock
			assert.Equal(t, tt.want, feed.Of(p, now))
		})
	}
}

// TestSlowWatcherDropped: a watcher that takes nothing is dropped after Behind changes; the
// feed goes on for the watcher that keeps up, and never waits for the slow one.
func TestSlowWatcherDropped(t *testing.T) {
	s := &shelf{p: stock.Product{SKU: "a", InitialStock: 10, Stock: 10}}
	h := newHub(t, s, feed.Options{Tick: 5 * time.Millisecond, Behind: 2})
	fast, err := h.Watch(t.Context(), "a")
	require.NoError(t, err)
	slow, err := h.Watch(t.Context(), "a")
	require.NoError(t, err)
	<-fast.Changed()
	assert.Equal(t, int64(10), fast.Take().Stock)
	for want := int64(9); ; want-- {
		s.sell()
		select {
		case <-fast.Changed():
		case <-time.After(5 * time.Second):
			t.Fatal("the watcher that keeps up heard nothing: the feed waited for the slow one")
		}
		require.Equal(t, want, fast.Take().Stock)
		select {
		case <-slow.Done():
			assert.LessOrEqual(t, want, int64(8), "dropped before it fell Behind changes behind")
			assert.Equal(t, 1, h.Watching())
			return
		default:
		}
		require.Positive(t, want, "the slow watcher was never dropped")
	}
}

// TestWatch: an unknown product is stock.ErrNotFound; past Max a watch is ErrFull; Close ends
// every watcher and refuses new ones.
func TestWatch(t *testing.T) {
	s := &shelf{p: stock.Product{SKU: "a", InitialStock: 1, Stock: 1}}
	h := newHub(t, s, feed.Options{Max: 2})
	_, err := h.Watch(t.Context(), "b")
	require.ErrorIs(t, err, stock.ErrNotFound)
	w1, err := h.Watch(t.Context(), "a")
	require.NoError(t, err)
	_, err = h.Watch(t.Context(), "a")
	require.NoError(t, err)
	_, err = h.Watch(t.Context(), "a")
	require.ErrorIs(t, err, feed.ErrFull)
	w1.Close()
	w3, err := h.Watch(t.Context(), "a")
	require.NoError(t, err, "a watcher that left made room")
	h.Close()
	select {
	case <-w3.Done():
	default:
		t.Fatal("Close left a watcher open")
	}
	_, err = h.Watch(t.Context(), "a")
	require.ErrorIs(t, err, feed.ErrClosed)
}
