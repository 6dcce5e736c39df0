package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// A Guard is what a section's write checks in the database for when its lock has failed (granted
// twice, a lease run out under a paused holder). The lock keeps the hot row calm; the guard
// keeps the invariant.
type Guard int

const (
	// Version reads the product and writes UPDATE ... WHERE version = ? AND stock >= ?: a write
	// that lost to another writer changes nothing, and the section reads again (hybrid, dblock).
	Version Guard = iota
	// Fence writes the lock's fencing token with the orders, WHERE fence < token: a holder whose
	// lock ran out can never write after a newer holder has (etcd, zookeeper).
	Fence
	// NoGuard writes the stock computed from the read, with no condition on the row: the lock
	// alone, as in the oversell that opens «Locks in practice» (docs/sources.md). Granted twice,
	// one holder's sale is written over and the product oversold. The unguarded twins and naive
	// use it, unsafe on purpose: they prove that the checks see a failed lock oversell.
	NoGuard
)

// write places reqs under r's guard, with h's locks held (nil: no lock). It returns the answers
// and, for the version guard, the products as the section left them (nil when it cannot say).
func (r *runner) write(ctx context.Context, h *holds, reqs []stock.CheckoutRequest) ([]stock.Placed, map[string]*stock.Product) {
	if len(reqs) == 0 {
		return nil, nil
	}
	switch r.guard {
	case Version:
		known := map[string]*stock.Product{}
		if h != nil {
			for i, l := range h.locks {
				known[h.skus[i]] = l.Known()
			}
		}
		return r.versioned(ctx, reqs, known)
	case Fence:
		return r.fenced(ctx, h, reqs), nil
	}
	return r.unguarded(ctx, reqs), nil
}

// versioned is the version-guarded write: read the products, place every request at those
// versions in one transaction (stock.Store.PlaceAt), on a conflict read again, up to attempts
// times, then busy. Never blind: an attempt matches the versions it read or writes nothing.
// known, the products as the last writer left them (Lock.Known), replaces the read when the
// batch fits: one query fewer under the locks. A stale one fails the version check at no cost
// to the attempts; it never refuses alone (a cancel returns units without moving the version).
func (r *runner) versioned(ctx context.Context, reqs []stock.CheckoutRequest, known map[string]*stock.Product) ([]stock.Placed, map[string]*stock.Product) {
	skus := reqs[0].SKUs()
	asked := map[string]int64{}
	for _, req := range reqs {
		for _, line := range req.Lines {
			asked[line.SKU] += int64(line.Quantity)
		}
	}
	for i := 1; ; {
		var (
			reads    []stock.Product
			err      error
			snapshot = fits(skus, known, asked)
		)
		if snapshot {
			for _, sku := range skus {
				reads = append(reads, *known[sku])
			}
		} else if reads, err = r.store.Reads(ctx, skus); err != nil {
			return failAll(len(reqs), err), nil
		}
		known = nil
		r.inSection(ctx, reqs)
		place := r.store.PlaceAt
		if i == 1 && admitted(reqs) {
			place = r.store.PlaceAdmitted
		}
		placed, err := place(ctx, reqs, reads)
		if err == nil {
			left, sold := after(reads, placed)
			if snapshot && !sold {
				continue // every request refused on the snapshot's word alone, no version checked: ask the rows
			}
			return placed, left
		}
		if !errors.Is(err, stock.ErrVersionConflict) {
			return failAll(len(reqs), err), nil
		}
		if snapshot {
			continue // older than the rows: read them, as without one
		}
		if i >= attempts {
			return failAll(len(reqs), stock.Busy(stock.BusyConflicts, fmt.Errorf("%d version conflicts on the batch's products: %w", i, err))), nil
		}
		r.metrics.retried(r.name)
		i++
	}
}

// fits reports whether every product of skus is known and holds the units asked of it.
func fits(skus []string, known map[string]*stock.Product, asked map[string]int64) bool {
	for _, sku := range skus {
		if p := known[sku]; p == nil || p.Stock < asked[sku] {
			return false
		}
	}
	return true
}

// after is the products as a batch placed at reads left them, and whether it sold anything.
func after(reads []stock.Product, placed []stock.Placed) (map[string]*stock.Product, bool) {
	sold := map[string]int64{}
	for _, p := range placed {
		for _, line := range p.Checkout.Lines {
			if p.Err == nil {
				sold[line.SKU] += int64(line.Quantity)
			}
		}
	}
	left := make(map[string]*stock.Product, len(reads))
	for _, read := range reads {
		if n := sold[read.SKU]; n > 0 {
			read.Version++
			read.Stock -= n
		}
		left[read.SKU] = &read
	}
	return left, len(sold) > 0
}

// admitted reports whether every line of reqs holds a reservation: admission vouched for it.
func admitted(reqs []stock.CheckoutRequest) bool {
	for _, req := range reqs {
		if slices.ContainsFunc(req.Lines, func(l stock.OrderRequest) bool { return l.Reservation.ID == "" }) {
			return false
		}
	}
	return true
}

// fenced places reqs under the fencing tokens of h's locks (stock.Store.PlaceFenced). A section
// whose lock is known gone is abandoned before it writes; after that, the token stops a holder
// whose lock runs out. A fence ahead of the lock service itself (replaced, its sequence
// restarted: lock.Lock.Ahead) was granted to no holder: it is reset and the write retried once.
// A genuine fence-out is busy, never a sale.
func (r *runner) fenced(ctx context.Context, h *holds, reqs []stock.CheckoutRequest) []stock.Placed {
	recovered := false
	for attempt := 1; ; attempt++ {
		tokens := make(map[string]stock.Token, len(h.skus))
		for i, sku := range h.skus {
			token, err := h.locks[i].Token(ctx)
			if err != nil {
				key := r.locker.Key(sku)
				r.metrics.lostAt(r.name, key)
				return failAll(len(reqs), stock.Busy(stock.BusyLockLost, fmt.Errorf("lock %s lost before the write, section abandoned", key)))
			}
			tokens[sku] = token
		}
		placed, err := r.store.PlaceFenced(ctx, reqs, tokens, func(ctx context.Context) error {
			r.inSection(ctx, reqs)
			return nil
		})
		var fenceErr *stock.FenceError
		if errors.As(err, &fenceErr) && !recovered {
			if h.locks[slices.Index(h.skus, fenceErr.SKU)].Ahead(ctx, fenceErr) && r.store.ResetFence(ctx, fenceErr.SKU, tokens[fenceErr.SKU].Fence, fenceErr.Fence) == nil {
				recovered = true
				continue
			}
		}
		switch {
		case err == nil:
			return placed
		case errors.Is(err, stock.ErrFencedOut):
			r.metrics.fenced(r.name)
			err = stock.Busy(stock.BusyFencedOut, err)
		case errors.Is(err, stock.ErrVersionConflict) && attempt < attempts:
			r.metrics.retried(r.name) // a writer outside the lock moved the stock: read again
			continue
		case errors.Is(err, stock.ErrVersionConflict):
			err = stock.Busy(stock.BusyConflicts, err)
		}
		return failAll(len(reqs), err)
	}
}

// unguarded decides reqs against one read and writes the stock it computed with no condition on
// the rows (stock.Store.PlaceUnguarded). A buyer or key taken between read and insert: busy.
func (r *runner) unguarded(ctx context.Context, reqs []stock.CheckoutRequest) []stock.Placed {
	placed, err := r.store.PlaceUnguarded(ctx, reqs, func(ctx context.Context) error {
		if r.pause > 0 {
			select {
			case <-time.After(r.pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		r.inSection(ctx, reqs)
		return ctx.Err()
	})
	if errors.Is(err, stock.ErrVersionConflict) {
		return failAll(len(reqs), stock.Busy(stock.BusyConflicts, err))
	}
	if err != nil {
		return failAll(len(reqs), err)
	}
	return placed
}
