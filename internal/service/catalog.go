package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/flashsale/seckill/internal/stock"
)

// catalog is this instance's memory of the products' sale windows and waiting rooms, so that an
// order outside its window is answered from memory, and one of a product with a waiting room is
// known to need its pass, touching neither Redis nor the database rows: before a flash
// sale opens, its buyers flood the endpoint — that is the normal case, and it must cost no more
// than a sold-out answer. An entry is read from the database at most every ttl, and dropped at
// once when a reset of the product is heard (a PUT on any instance: the sold-out flags' channel);
// a window changes only with a PUT. The orders that find an entry missing at the same moment —
// the first seconds of a sale on a cold instance — share one read (singleflight) rather than
// take a connection each from the pool the sale needs. The database's clock has the last word: a section decides
// the window again (stock.Window.Check in the batch), so a skewed instance cannot sell outside.
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

// check answers an order for sku at now from the window: nil (go on), a
// *stock.SaleNotStartedError or stock.ErrSaleEnded; room says whether the product has a waiting
// room. An unknown product goes on: the strategy answers it. A database that cannot be asked
// leaves the last entry in force; with none, the order is refused with the read's error — whether
// it needs a pass cannot be told, and the door refuses what it cannot judge.
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
