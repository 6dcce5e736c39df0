package frontdoor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
	"github.com/flashsale/seckill/internal/stock"
)

// open is a product whose waiting room admits rate buyers a second, with no start: its doors
// open at the first join.
func open(rate int) frontdoor.Product {
	return frontdoor.Product{SKU: "iphone-17", Room: frontdoor.Config{AdmitPerS: rate}}
}

func TestConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    frontdoor.Config
		ok   bool
	}{
		{"defaults", frontdoor.Config{AdmitPerS: 50}, true},
		{"least", frontdoor.Config{AdmitPerS: 1, PassTTL: 10 * time.Second}, true},
		{"most", frontdoor.Config{AdmitPerS: 100000, PassTTL: time.Hour}, true},
		{"no rate", frontdoor.Config{}, false},
		{"rate too high", frontdoor.Config{AdmitPerS: 100001}, false},
		{"pass too short", frontdoor.Config{AdmitPerS: 1, PassTTL: 9 * time.Second}, false},
		{"pass too long", frontdoor.Config{AdmitPerS: 1, PassTTL: 3601 * time.Second}, false},
		{"pass not whole seconds", frontdoor.Config{AdmitPerS: 1, PassTTL: 10500 * time.Millisecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, stock.ErrInvalid)
			assert.Equal(t, "invalid_argument", stock.Code(err))
		})
	}
	assert.Equal(t, frontdoor.DefaultPassTTL, frontdoor.Config{AdmitPerS: 1}.WithDefaults().PassTTL)
}

// TestJoinOnce: one ticket per buyer and product, however often and wherever the buyer joins —
// also when its joins race on three instances.
func TestJoinOnce(t *testing.T) {
	ctx := t.Context()
	door := instances(t, 3, keyPrefix(t))
	p := open(1)
	start := make(chan struct{})
	var wg sync.WaitGroup
	waits := make([]frontdoor.Wait, 30)
	for i := range waits {
		wg.Go(func() {
			<-start
			w, err := door[i%3].room.Join(ctx, p, "u-1")
			assert.NoError(t, err)
			waits[i] = w
		})
	}
	close(start)
	wg.Wait()
	for _, w := range waits {
		assert.Equal(t, waits[0].Ticket, w.Ticket)
		assert.EqualValues(t, 1, w.Place)
	}
	other, err := door[1].room.Join(ctx, p, "u-2")
	require.NoError(t, err)
	assert.NotEqual(t, waits[0].Ticket, other.Ticket)
	assert.EqualValues(t, 2, other.Place)
}

// TestArrivalOrderAfterStart: after the doors open, places follow arrival, whichever instance
// a buyer joins on; the first in line comes in at once, the others wait their turn.
func TestArrivalOrderAfterStart(t *testing.T) {
	ctx := t.Context()
	door := instances(t, 3, keyPrefix(t))
	p := open(1)
	for i := range 20 {
		w, err := door[i%3].room.Join(ctx, p, fmt.Sprintf("u-%d", i))
		require.NoError(t, err)
		require.EqualValues(t, i+1, w.Place, "arrival order")
		require.NotNil(t, w.Position)
		if i == 0 {
			assert.True(t, w.Admitted, "the first in line comes in as the doors open")
			continue
		}
		assert.False(t, w.Admitted)
		assert.Positive(t, w.ETA)
		assert.GreaterOrEqual(t, w.PollAfter, 100*time.Millisecond)
		assert.LessOrEqual(t, *w.Position, int64(i-1))
	}
}

// TestEarlyJoinersShuffled: those who join before the start are placed in a random order at the
// start, not in the order they came — and every instance, racing at the start, sees one order.
func TestEarlyJoinersShuffled(t *testing.T) {
	const n = 200
	ctx := t.Context()
	door := instances(t, 3, keyPrefix(t))
	p := open(1)
	p.StartsAt = redisNow(t, door[0].client).Add(time.Hour)
	tickets := make([]string, n)
	for i := range n {
		w, err := door[i%3].room.Join(ctx, p, fmt.Sprintf("u-%03d", i))
		require.NoError(t, err)
		require.Nil(t, w.Position, "no position before the doors open")
		require.True(t, w.OpensAt.Equal(p.StartsAt))
		require.Positive(t, w.ETA)
		tickets[i] = w.Ticket
	}
	again, err := door[0].room.Poll(ctx, p, "u-000", tickets[0])
	require.NoError(t, err)
	require.Nil(t, again.Position, "still shut")

	p.StartsAt = redisNow(t, door[0].client) // the doors open now
	// Every instance polls every ticket at once: the first calls after the start race.
	places := make([][n]int64, 3)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for d := range door {
		for i := range n {
			wg.Go(func() {
				<-start
				w, err := door[d].room.Poll(ctx, p, fmt.Sprintf("u-%03d", i), tickets[i])
				if assert.NoError(t, err) && assert.NotNil(t, w.Position) {
					places[d][i] = w.Place
				}
			})
		}
	}
	close(start)
	wg.Wait()
	require.Equal(t, places[0], places[1], "two instances drew two orders")
	require.Equal(t, places[0], places[2], "two instances drew two orders")
	seen := map[int64]bool{}
	for _, place := range places[0] {
		require.True(t, place >= 1 && place <= n && !seen[place], "places are not 1..%d once each: %v", n, places[0])
		seen[place] = true
	}
	// In a random order about half the pairs are inverted (n(n-1)/4, with a standard deviation
	// near 470 for n = 200); in arrival order, none.
	inversions := 0
	for i := range n {
		for j := i + 1; j < n; j++ {
			if places[0][i] > places[0][j] {
				inversions++
			}
		}
	}
	assert.Greater(t, inversions, n*(n-1)/8, "arriving early gave an advantage: the early joiners were placed in the order they came")
}

// TestPollWaitsThenAdmits: a waiting buyer's position falls and never rises, its wait ends in a
// pass bound to it, its product and an expiry, the same pass on every poll and every instance,
// and every instance accepts it.
func TestPollWaitsThenAdmits(t *testing.T) {
	ctx := t.Context()
	door := instances(t, 3, keyPrefix(t))
	p := open(20)
	p.Room.PassTTL = 30 * time.Second
	var last frontdoor.Wait
	for i := range 6 {
		w, err := door[i%3].room.Join(ctx, p, fmt.Sprintf("u-%d", i))
		require.NoError(t, err)
		last = w
	}
	position := *last.Position
	var w frontdoor.Wait
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		require.True(t, time.Now().Before(deadline), "never admitted")
		var err error
		w, err = door[i%3].room.Poll(ctx, p, "u-5", last.Ticket)
		require.NoError(t, err)
		require.LessOrEqual(t, *w.Position, position, "the position rose")
		position = *w.Position
		if w.Admitted {
			break
		}
		time.Sleep(w.PollAfter) // the wait the room asks of its buyer
	}
	assert.EqualValues(t, 0, *w.Position)
	assert.NotEmpty(t, w.Pass)
	assert.False(t, w.AdmittedAt.After(w.Now), "admitted after the answer that says so")
	assert.WithinDuration(t, w.Now.Add(30*time.Second), w.PassExpiresAt, 1100*time.Millisecond)
	for _, d := range door {
		again, err := d.room.Poll(ctx, p, "u-5", last.Ticket)
		require.NoError(t, err)
		assert.Equal(t, w.Pass, again.Pass, "the same pass on every poll until it expires")
		assert.Equal(t, w.AdmittedAt, again.AdmittedAt)
		assert.NoError(t, d.passes.CheckPass(ctx, w.Pass, "u-5", p.SKU), "every instance accepts every other's pass")
	}
}

// TestTicketsAreTheBuyers: a ticket answers only its buyer; an unknown one is not found.
func TestTicketsAreTheBuyers(t *testing.T) {
	ctx := t.Context()
	door := instances(t, 1, keyPrefix(t))
	p := open(1)
	mine, err := door[0].room.Join(ctx, p, "u-1")
	require.NoError(t, err)
	_, err = door[0].room.Join(ctx, p, "u-2")
	require.NoError(t, err)
	for name, tc := range map[string][2]string{
		"another buyer's": {"u-2", mine.Ticket}, "unknown": {"u-1", "made-up"}, "empty": {"u-1", ""}, "a buyer with none": {"u-3", mine.Ticket},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := door[0].room.Poll(ctx, p, tc[0], tc[1])
			require.ErrorIs(t, err, stock.ErrNotFound)
		})
	}
}

// TestSoldOutAndEnded: sold out ends every wait (the admitted keep their pass: their order hears
// sold out); after ends_at nobody joins or waits.
func TestSoldOutAndEnded(t *testing.T) {
	ctx := t.Context()
	door := instances(t, 1, keyPrefix(t))
	p := open(1)
	first, err := door[0].room.Join(ctx, p, "u-1")
	require.NoError(t, err)
	require.True(t, first.Admitted)
	second, err := door[0].room.Join(ctx, p, "u-2")
	require.NoError(t, err)
	require.False(t, second.Admitted)

	p.SoldOut = true
	_, err = door[0].room.Join(ctx, p, "u-3")
	require.ErrorIs(t, err, stock.ErrSoldOut)
	_, err = door[0].room.Poll(ctx, p, "u-2", second.Ticket)
	require.ErrorIs(t, err, stock.ErrSoldOut)
	w, err := door[0].room.Poll(ctx, p, "u-1", first.Ticket)
	require.NoError(t, err)
	assert.True(t, w.Admitted)

	p.SoldOut, p.EndsAt = false, redisNow(t, door[0].client)
	_, err = door[0].room.Join(ctx, p, "u-3")
	require.ErrorIs(t, err, stock.ErrSaleEnded)
	_, err = door[0].room.Poll(ctx, p, "u-2", second.Ticket)
	require.ErrorIs(t, err, stock.ErrSaleEnded)
}

// TestResetEmptiesTheRoom: a new sale round starts with an empty line.
func TestResetEmptiesTheRoom(t *testing.T) {
	ctx := t.Context()
	door := instances(t, 1, keyPrefix(t))
	p := open(1)
	w, err := door[0].room.Join(ctx, p, "u-1")
	require.NoError(t, err)
	require.NoError(t, door[0].room.Reset(ctx, p.SKU))
	_, err = door[0].room.Poll(ctx, p, "u-1", w.Ticket)
	require.ErrorIs(t, err, stock.ErrNotFound)
	s, err := door[0].room.Stats(ctx, p)
	require.NoError(t, err)
	assert.Zero(t, s.Joined)
}

// TestRefusedWhenRedisIsDown: when the door cannot judge — the room's state or the pass key out
// of reach — it refuses (unavailable), never lets the buyer through.
func TestRefusedWhenRedisIsDown(t *testing.T) {
	ctx := t.Context()
	prefix := keyPrefix(t)
	gone := backendtest.Redis(t)
	require.NoError(t, gone.Close())
	passes := frontdoor.NewPasses(gone, frontdoor.Options{Prefix: prefix})
	room := frontdoor.NewRoom(gone, passes, frontdoor.Options{Prefix: prefix})
	limiter, err := frontdoor.NewLimiter(gone, frontdoor.BuyerLimit{Rate: 10}, frontdoor.Options{Prefix: prefix})
	require.NoError(t, err)

	_, err = room.Join(ctx, open(1), "u-1")
	assert.ErrorIs(t, err, stock.ErrUnavailable)
	_, err = room.Poll(ctx, open(1), "u-1", "t")
	assert.ErrorIs(t, err, stock.ErrUnavailable)
	assert.ErrorIs(t, passes.CheckPass(ctx, "a.pass.here", "u-1", "iphone-17"), stock.ErrUnavailable, "no key: the pass cannot be judged")
	assert.ErrorIs(t, limiter.Allow(ctx, "u-1"), stock.ErrUnavailable)

	// The canceled request of a buyer who left is not an outage.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = frontdoor.NewRoom(backendtest.Redis(t), passes, frontdoor.Options{Prefix: prefix}).Join(canceled, open(1), "u-1")
	assert.ErrorIs(t, err, context.Canceled)
}
