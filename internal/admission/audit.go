package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/stock"
)

// Held is one reservation: its id, its buyer, its units and the request's Idempotency-Key.
type Held struct {
	ID, User, IdempotencyKey string
	Units                    int
	instance                 string // the instance holding it, or QueueOwner
}

// Held reads the reservation user holds for sku: stock.ErrNotFound when there is none.
func (a *Ledger) Held(ctx context.Context, sku, user string) (Held, error) {
	k := KeysOf(sku)
	held, err := a.client.HGet(ctx, k.Queued, user).Result()
	if errors.Is(err, redis.Nil) {
		held, err = a.client.HGet(ctx, k.Reserved, user).Result()
	}
	if errors.Is(err, redis.Nil) {
		return Held{}, fmt.Errorf("reservation of %s/%s: %w", sku, user, stock.ErrNotFound)
	}
	if err != nil {
		return Held{}, fmt.Errorf("reservation of %s/%s: %w: %w", sku, user, stock.ErrUnavailable, err)
	}
	h, ok := parseHeld(user, held)
	if !ok {
		return Held{}, fmt.Errorf("reservation of %s/%s: %q: %w", sku, user, held, stock.ErrNotFound)
	}
	return h, nil
}

// Reservations lists every reservation of sku, in flight or handed over to the order queue.
func (a *Ledger) Reservations(ctx context.Context, sku string) ([]Held, error) {
	k := KeysOf(sku)
	pipe := a.client.Pipeline()
	reserved, queued := pipe.HGetAll(ctx, k.Reserved), pipe.HGetAll(ctx, k.Queued)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reservations of %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	return append(parseHash(reserved.Val()), parseHash(queued.Val())...), nil
}

// parseHash reads the reservations of a hash of them, user to reservation (parseHeld).
func parseHash(hash map[string]string) []Held {
	out := make([]Held, 0, len(hash))
	for user, held := range hash {
		if h, ok := parseHeld(user, held); ok {
			out = append(out, h)
		}
	}
	return out
}

// parseHeld reads user's reservation as admit.lua stores it: id, units, instance, key.
func parseHeld(user, held string) (Held, bool) {
	f := strings.SplitN(held, "|", 4)
	if len(f) != 4 {
		return Held{}, false
	}
	units, _ := strconv.Atoi(f[1])
	return Held{ID: f[0], User: user, Units: units, IdempotencyKey: f[3], instance: f[2]}, true
}

// RecentWindow is how long after its last order here this instance watches a product: sweeps
// it, reports its stranded units, checks its queue messages.
const RecentWindow = time.Minute

// Recent lists the products this instance admitted orders for within the window, and forgets
// older ones.
func (a *Ledger) Recent(window time.Duration) []string {
	var out []string
	now := a.opts.Clock()
	a.recent.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > window {
			a.recent.Delete(k)
		} else {
			out = append(out, k.(string))
		}
		return true
	})
	return out
}

// State is sku's admission state in Redis, for the audit.
type State struct {
	Stock        *int64 // the counter; nil when there is none
	Reservations int64  // reservations in flight: admitted, neither settled, given back nor swept
	Reserved     int64  // their units
	Live         int64  // the units of those whose instance is alive
}

// State reads sku's admission state in one step; live is the instances alive now (Live).
func (a *Ledger) State(ctx context.Context, sku string, live []string) (State, error) {
	k := KeysOf(sku)
	v, err := stateScript.Run(ctx, a.client, []string{k.Stock, k.Reserved, k.Queued}, argsOf(live)...).Slice()
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
	var st State
	if s, ok := v[0].(string); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return State{}, err
		}
		st.Stock = &n
	}
	st.Reservations, _ = v[1].(int64)
	st.Reserved, _ = v[2].(int64)
	st.Live, _ = v[3].(int64)
	return st, nil
}

// Invalidate deletes sku's admission state before a reset, so that no order is admitted against
// the old round's counter. It fails without Redis: the reset must not go on.
func (a *Ledger) Invalidate(ctx context.Context, sku string) error {
	if err := a.client.Del(ctx, KeysOf(sku).all()...).Err(); err != nil {
		return fmt.Errorf("invalidate admission of %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	return nil
}

// Reconcile replaces sku's admission state with the database's. Safe at any time: orders in
// flight can only leave the counter above the database, which the database then corrects.
func (a *Ledger) Reconcile(ctx context.Context, sku string) error {
	err := a.warm(ctx, sku, "force")
	if errors.Is(err, ErrRedisDown) {
		return fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
	return err
}

// Restock gives admission back the units and buyers of sku's orders the database has ended
// (cancelled, expired), once per order however often called, and returns the units returned.
func (a *Ledger) Restock(ctx context.Context, sku string, ended []stock.Order) (int64, error) {
	k := KeysOf(sku)
	ks := make([]string, 0, 2+len(ended))
	ks = append(ks, k.Stock, k.Buyers)
	args := make([]any, 0, 2*len(ended))
	for _, o := range ended {
		ks = append(ks, returnedKey(sku, o.OrderID))
		args = append(args, o.UserID, o.Quantity)
	}
	n, err := restockScript.Run(ctx, a.client, ks, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("restock %s: %w: %w", sku, stock.ErrUnavailable, err)
	}
	return n, nil
}
