package admission

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// AdmitCheckout admits every line of a checkout or none. lines are its products in SKU order,
// each with the buyer, its quantity and the checkout's Idempotency-Key. On one Redis (a single
// node, a Sentinel's master, a Redlock's first node) it is one script over every product's keys
// (lua/admitcheckout.lua): a refused line takes nothing anywhere. A Redis Cluster refuses a
// script whose keys span slots, and each product's keys sit in a slot of their own: there the
// lines are admitted one by one, in SKU order, as Admit admits an order, and the ones admitted
// are given back at the first refusal — a refused checkout holds its earlier lines' units for a
// round trip, during which their other buyers hear busy (units held), never sold out. It returns
// a reservation per line (the caller settles or gives back each), or the first refused line's
// answer naming every line refused for the same reason (a *stock.CheckoutError), or busy, or
// ErrRedisDown, as Admit.
func (a *Ledger) AdmitCheckout(ctx context.Context, lines []stock.OrderRequest) ([]stock.Reservation, error) {
	return a.AdmitCheckoutWithin(ctx, lines, 0)
}

// AdmitCheckoutWithin is AdmitCheckout for a checkout that waits behind every other order of its
// products (the queued strategy's), as AdmitWithin for an order: a line whose product holds
// bound reservations or more answers busy. A line that names its reservation keeps that id (a
// queued checkout's lines all bear the checkout's).
func (a *Ledger) AdmitCheckoutWithin(ctx context.Context, lines []stock.OrderRequest, bound int) ([]stock.Reservation, error) {
	if planted.On(planted.IgnoredWaitingBound) {
		bound = 0
	}
	if _, cluster := a.client.(*redis.ClusterClient); cluster {
		return a.admitLineByLine(ctx, lines, bound)
	}
	if !a.Available() {
		return nil, ErrRedisDown
	}
	res := make([]stock.Reservation, len(lines))
	keys := make([]string, 0, 4*len(lines))
	args := make([]any, 0, 4+2*len(lines))
	args = append(args, a.instance, lines[0].UserID, lines[0].IdempotencyKey, bound)
	for i, l := range lines {
		a.touch(l.SKU)
		if res[i] = l.Reservation; res[i].ID == "" {
			res[i].ID = reservationID()
		}
		a.track(res[i].ID, time.Time{}) // before Redis has it, as Admit's
		keys = append(keys, KeysOf(l.SKU).all()...)
		args = append(args, l.Quantity, res[i].ID)
	}
	codes, err := a.admitCheckout(ctx, lines, keys, args)
	// Held units are decided within a section's time: ask again, as Admit does, until they are.
	start := time.Now()
	for pause := time.Millisecond; err == nil && held(codes) && time.Since(start)+pause < a.heldWait; pause = min(2*pause, 16*time.Millisecond) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(pause/2 + rand.N(pause)):
			codes, err = a.admitCheckout(ctx, lines, keys, args)
		}
	}
	refused := make([]error, len(lines))
	if err == nil {
		for i, l := range lines {
			refused[i] = a.answer(l, codes[i], a.heldWait, bound)
		}
		err = stock.Refusal(lines, refused)
	}
	if err != nil {
		for _, r := range res {
			a.Done(r)
		}
		return nil, err
	}
	return res, nil
}

// held reports whether a checkout's only refusals are of held units, which may come back.
func held(codes []int64) bool {
	some := false
	for _, c := range codes {
		switch c {
		case 0:
		case 4:
			some = true
		default:
			return false
		}
	}
	return some
}

// admitCheckout runs lua/admitcheckout.lua once, warming the counters of the products that have
// none first.
func (a *Ledger) admitCheckout(ctx context.Context, lines []stock.OrderRequest, keys []string, args []any) ([]int64, error) {
	for warmed := false; ; warmed = true {
		codes, err := admitCheckoutScript.Run(ctx, a.client, keys, args...).Int64Slice()
		if err == nil && len(codes) != len(lines) {
			err = fmt.Errorf("%d answers for %d lines", len(codes), len(lines))
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			a.Down("admission", err)
			return nil, fmt.Errorf("%w: %w", ErrRedisDown, err)
		}
		missing := false
		for i, c := range codes {
			if c != -1 {
				continue
			}
			if warmed {
				return nil, fmt.Errorf("admission %s: counter vanished right after warming: %w", lines[i].SKU, ErrRedisDown)
			}
			if err := a.warm(ctx, lines[i].SKU, "nx"); errors.Is(err, stock.ErrNotFound) {
				return nil, &stock.CheckoutError{SKUs: []string{lines[i].SKU}, Err: err}
			} else if err != nil {
				return nil, err
			}
			missing = true
		}
		if !missing {
			return codes, nil
		}
	}
}

// admitLineByLine admits a checkout's lines one by one, in SKU order, giving back the ones
// admitted at the first refusal (AdmitCheckout on a Redis Cluster).
func (a *Ledger) admitLineByLine(ctx context.Context, lines []stock.OrderRequest, bound int) ([]stock.Reservation, error) {
	var res []stock.Reservation
	for i, l := range lines {
		r, err := a.AdmitWithin(ctx, l, bound)
		if err != nil {
			taken := slices.Clone(lines[:i])
			for j := range taken {
				taken[j].Reservation = res[j]
			}
			a.GiveBackCheckout(ctx, taken, errOtherLine)
			if errors.Is(err, ErrRedisDown) || stock.Code(err) == "busy" {
				return nil, err
			}
			return nil, &stock.CheckoutError{SKUs: []string{lines[i].SKU}, Err: err}
		}
		res = append(res, r)
	}
	return res, nil
}

// GiveBackCheckout returns the reservations of a checkout's lines (each with its Reservation)
// after the checkout failed with err, as GiveBack an order's. A line the database found short of
// stock caps its counter at what the database holds; the others were refused for another line's
// sake, which says nothing about their own stock.
func (a *Ledger) GiveBackCheckout(ctx context.Context, lines []stock.OrderRequest, err error) {
	var soldOut *stock.SoldOutError
	for _, line := range lines {
		lineErr := err
		if errors.As(err, &soldOut) && soldOut.SKU != line.SKU {
			lineErr = errOtherLine
		}
		a.GiveBack(ctx, line, lineErr)
	}
}

// errOtherLine is why a line admitted for a checkout was given back: another line was refused.
var errOtherLine = fmt.Errorf("checkout refused for another of its lines: %w", ErrNotPlaced)
