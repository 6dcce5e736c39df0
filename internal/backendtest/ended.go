package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/stock"
)

// Ended waits until every accepted order of a queued sale has ended — placed or rejected, its
// record final — within limit, and returns the placed ones as the database has them: the orders
// "every 202 ends" promises. An order still queued by then fails the test.
func Ended(t *testing.T, insts []Instance, accepted []stock.Order, limit time.Duration) (placed []stock.Order, rejected map[string]string) {
	t.Helper()
	rejected = map[string]string{}
	deadline := time.Now().Add(limit)
	for i, o := range accepted {
		// A follower asks again when the queue cannot answer (a cluster electing a leader for the
		// records), as a buyer's client would on a 503, until the deadline.
		got, err := insts[i%len(insts)].Wait(context.Background(), stock.OrderRef(o.OrderID), max(time.Millisecond, time.Until(deadline)))
		for errors.Is(err, stock.ErrUnavailable) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // the client's backoff before it asks again
			got, err = insts[i%len(insts)].Wait(context.Background(), stock.OrderRef(o.OrderID), max(time.Millisecond, time.Until(deadline)))
		}
		require.NoError(t, err, "order %s", o.OrderID)
		switch got.Status {
		case stock.Queued:
			t.Fatalf("order %s still queued %s after the sale", o.OrderID, limit)
		case stock.Rejected:
			rejected[o.OrderID] = got.Reason
		default:
			assert.True(t, got.Status.Active(), "order %s: %s", o.OrderID, got.Status)
			placed = append(placed, got.Lines[0])
		}
	}
	return placed, rejected
}
