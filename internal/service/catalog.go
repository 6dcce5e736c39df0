package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// catalog is this instance's memory of the products' sale windows, so that an order outside its
// window is answered from memory, touching neither Redis nor the database rows: before a flash
// sale opens, its buyers flood the endpoint — that is the normal case, and it must cost no more
// than a sold-out answer. An entry is read from the database at most every ttl, and dropped at
// once when a reset of the product is heard (a PUT on any instance: the sold-out flags' channel);
// a window changes only with a PUT. The database's clock has the last word: a section decides
// the window again (stock.Window.Check in the batch), so a skewed instance cannot sell outside.
type catalog struct {
	store *stock.Store
	ttl   time.Duration

	mu      sync.Mutex
	entries map[string]catalogEntry
}

type catalogEntry struct {
	window  stock.Window
	known   bool // false: no such product (a flood of orders for it costs one read per ttl too)
	checked time.Time
}

func newCatalog(store *stock.Store, ttl time.Duration) *catalog {
	return &catalog{store: store, ttl: ttl, entries: map[string]catalogEntry{}}
}

// check answers an order for sku at now from the window: nil (go on), a
// *stock.SaleNotStartedError or stock.ErrSaleEnded. An unknown product, or a database that
// cannot be asked, goes on: the strategy answers those.
func (c *catalog) check(ctx context.Context, sku string, now time.Time) error {
	c.mu.Lock()
	e, ok := c.entries[sku]
	c.mu.Unlock()
	if !ok || now.Sub(e.checked) > c.ttl {
		p, err := c.store.Product(ctx, sku)
		switch {
		case err == nil:
			e = catalogEntry{window: p.Window, known: true, checked: now}
		case errors.Is(err, stock.ErrNotFound):
			e = catalogEntry{checked: now}
		default:
			return nil
		}
		c.mu.Lock()
		if len(c.entries) >= 10_000 {
			clear(c.entries) // a bound on memory; entries only save reads
		}
		c.entries[sku] = e
		c.mu.Unlock()
	}
	if !e.known {
		return nil
	}
	return e.window.Check(sku, now)
}

// drop forgets sku's window: it was reset.
func (c *catalog) drop(sku string) {
	c.mu.Lock()
	delete(c.entries, sku)
	c.mu.Unlock()
}
