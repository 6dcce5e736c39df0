package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// A Guard is what a section's write checks in the database, for when its lock has failed: a
// lock granted twice after a failover, a lease or session that ran out under a paused holder.
// The lock keeps the hot row calm; the guard keeps the invariant.
type Guard int

const (
	// Version reads the product and writes UPDATE ... WHERE version = ? AND stock >= ?: a write
	// that lost to any other writer changes nothing, and the section reads again (hybrid,
	// dblock).
	Version Guard = iota
	// Fence writes the lock's fencing token with the orders, WHERE fence < token: a holder whose
	// lock ran out can never write after a newer holder has (etcd, zookeeper).
	Fence
	// NoGuard writes the stock computed from the read with no condition on the row — the lock
	// alone, as in the oversell that opens «Locks in practice» (docs/sources.md) (eight servers, a Redis
	// master with replicas, a SET NX EX lock; after a failover 100 units were sold 170 times). It
	// is correct exactly as long as the lock is: a lock granted again after a failover, a lease
	// or session that ran out under a paused holder, and a second holder's sale is written over —
	// oversold. The unguarded twins (unguarded-redis, unguarded-etcd, unguarded-zookeeper) are
	// their guarded strategy's lock with NoGuard, and naive is NoGuard with no lock at all.
	// Unsafe on purpose, refused unless unsafe strategies are allowed: they exist so that every
	// check that should see a failed lock oversell does see it.
	NoGuard
)

// write places reqs under r's guard, with the locks of h held (nil: no lock). It returns the
// answers and, for the version guard, the products as the section left them (nil when it cannot
// say).
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

// versioned is the version-guarded write: read the products, then place every request at
// those versions in one transaction (stock.Store.PlaceAt), retrying the whole batch with fresh
// reads when another writer got there first — up to attempts times, then busy. It never writes
// blind: each attempt either matches the versions it read or writes nothing. A batch whose
// buyers admission vouched for skips the lookup of stored buyers on its first try
// (stock.Store.PlaceAdmitted).
//
// known holds, by SKU, the product as the last writer left it (hybrid: handed over with the
// lock, Lock.Known), taken instead of the first reads when every product is known and the batch
// fits in its stock: one query fewer per product inside the locks. It is only a hint — a stale
// one fails the version check like any stale read, and the batch reads again at no cost to its
// attempts — and it is never trusted to refuse a request on its own: a cancel gives units back
// without moving the version, so a batch that does not fit reads the rows, and a batch that
// would write nothing (every request refused: a new round's limits, a window) checks no version,
// so it reads the rows and decides again. It returns the answers and the products as this
// section left them (nil when it failed).
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

// after is the products as a batch placed at reads left them — a new version and fewer units
// for each it sold of, else as read — and whether it sold anything.
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

// admitted says whether admission vouched for every buyer of reqs: each line holds a
// reservation.
func admitted(reqs []stock.CheckoutRequest) bool {
	for _, req := range reqs {
		for _, line := range req.Lines {
			if line.Reservation.ID == "" {
				return false
			}
		}
	}
	return true
}

// fenced is the fenced write: the requests, under the holder's fencing tokens
// (stock.Store.PlaceFenced, fencedWrite).
func (r *runner) fenced(ctx context.Context, h *holds, reqs []stock.CheckoutRequest) []stock.Placed {
	var placed []stock.Placed
	err := r.fencedWrite(ctx, h.lockOf, func(tokens map[string]stock.Token) (err error) {
		placed, err = r.store.PlaceFenced(ctx, reqs, tokens, func(ctx context.Context) error {
			r.inSection(ctx, reqs)
			return nil
		})
		return err
	}, reqs[0].SKUs()...)
	if err != nil {
		return failAll(len(reqs), err)
	}
	return placed
}

// fencedWrite runs write under the fencing tokens of the locks (lockOf) of skus. A section
// whose lock is known to be gone (its lease or session) is abandoned before it writes; between
// that check and the write, the token is what stops a holder whose lock runs out. A write fenced
// out by a token ahead of the lock service itself — which no holder can have been granted: the
// service was replaced and its sequence started again — is retried once after resetting that
// fence (lock.Lock.Ahead); a genuine fence-out is busy, never a sale.
func (r *runner) fencedWrite(ctx context.Context, lockOf func(sku string) lock.Lock, write func(tokens map[string]stock.Token) error, skus ...string) error {
	recovered := false
	for attempt := 1; ; attempt++ {
		tokens := make(map[string]stock.Token, len(skus))
		for _, sku := range skus {
			token, err := lockOf(sku).Token(ctx)
			if err != nil {
				key := r.locker.Key(sku)
				r.metrics.lostAt(r.name, key)
				return stock.Busy(stock.BusyLockLost, fmt.Errorf("lock %s lost before the write, section abandoned", key))
			}
			tokens[sku] = token
		}
		err := write(tokens)
		var fenceErr *stock.FenceError
		if errors.As(err, &fenceErr) && !recovered {
			if lockOf(fenceErr.SKU).Ahead(ctx, fenceErr) && r.store.ResetFence(ctx, fenceErr.SKU, tokens[fenceErr.SKU].Fence, fenceErr.Fence) == nil {
				recovered = true
				continue
			}
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, stock.ErrFencedOut):
			r.metrics.fenced(r.name)
			return stock.Busy(stock.BusyFencedOut, err)
		case errors.Is(err, stock.ErrVersionConflict) && attempt < attempts:
			r.metrics.retried(r.name) // a writer outside the lock moved the stock: read again
			continue
		case errors.Is(err, stock.ErrVersionConflict):
			return stock.Busy(stock.BusyConflicts, err)
		}
		return err
	}
}

// unguarded reads the products, decides the requests against those reads, runs naive's pause
// and the fault hook, and writes the stock it computed, with no condition on the rows
// (stock.Store.PlaceUnguarded). Only a buyer or key taken between the read and the insert stops
// it: then nothing was written, and the requests answer busy.
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
