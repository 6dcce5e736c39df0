package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/flashsale/seckill/internal/stock"
)

// catalog is this instance's memory of the products' sale windows and waiting rooms: buyers
// flood a sale before it opens, and an order outside its window must cost no Redis, no database.
// An entry is read at most every ttl (one shared read, singleflight) and dropped on a reset (a
// PUT, the only way a window changes). A section checks the window again by the database's clock,
// so a skewed instance cannot sell outside it.
type catalog struct {
	read   func(ctx context.Context, sku string) (stock.Product, error) // Store.Product
	ttl    time.Duration
	flight singleflight.Group

	mu      sync.Mutex
	entries map[string]catalogEntry
}

type catalogEntry struct {
	window  stock.Window
	room    bool // the product has a waiting room: its orders need its pass
	known   bool // false: no such product (a flood of orders for it costs one read per ttl too)
	checked time.Time
}

// catalogRead bounds the shared read of a product's window.
const catalogRead = time.Second

func newCatalog(read func(ctx context.Context, sku string) (stock.Product, error), ttl time.Duration) *catalog {
	return &catalog{read: read, ttl: ttl, entries: map[string]catalogEntry{}}
}

// check answers an order for sku at now from the window (nil, *stock.SaleNotStartedError or
// stock.ErrSaleEnded) and says whether it needs a pass. An unknown product goes on to the strategy.
// A failed read keeps the last entry; with none, the door refuses what it cannot judge.
func (c *catalog) check(ctx context.Context, sku string, now time.Time) (room bool, err error) {
	c.mu.Lock()
	e, ok := c.entries[sku]
	c.mu.Unlock()
	if !ok || now.Sub(e.checked) > c.ttl {
		// The read is shared: it must not end with the request that happened to start it.
		v, err, _ := c.flight.Do(sku, func() (any, error) {
			readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), catalogRead)
			defer cancel()
			return c.read(readCtx, sku)
		})
		switch {
		case err == nil:
			p := v.(stock.Product)
			e = catalogEntry{window: p.Window, room: p.WaitingRoom != nil, known: true, checked: now}
		case errors.Is(err, stock.ErrNotFound):
			e = catalogEntry{checked: now}
		case ok:
			return e.room, e.window.Check(sku, now)
		default:
			return false, err
		}
		c.mu.Lock()
		if len(c.entries) >= 10_000 {
			clear(c.entries) // a bound on memory; entries only save reads
		}
		c.entries[sku] = e
		c.mu.Unlock()
	}
	if !e.known {
		return false, nil
	}
	return e.room, e.window.Check(sku, now)
}

// drop forgets sku's window: it was reset.
func (c *catalog) drop(sku string) {
	c.mu.Lock()
	delete(c.entries, sku)
	c.mu.Unlock()
}
