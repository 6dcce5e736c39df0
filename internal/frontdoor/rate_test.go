package frontdoor_test

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/frontdoor"
)

// TestAdmissionRateAcrossInstances: three instances share one waiting room; 1,500 buyers join
// before the doors open and 500 after. By Redis's clock, buyers come in at admit_per_s for the
// whole deployment — not per instance — in line order, every ticket in the end, and an instance
// killed mid-way changes neither the rate nor the order. Buyers poll as the room tells them to
// (poll_after), each poll going to the next live instance, as a load balancer would send them.
func TestAdmissionRateAcrossInstances(t *testing.T) {
	const (
		joiners = 2000
		early   = 1500
		rate    = 200
		window  = 3 * time.Second
		warmUp  = time.Second     // the window starts this long after the doors open
		killAt  = 2 * time.Second // instance 2 dies this long after the doors open: mid-window
	)
	ctx := t.Context()
	door := instances(t, 3, keyPrefix(t))
	for _, d := range door {
		backendtest.OpenConns(t, d.client, 32)
	}
	p := frontdoor.Product{SKU: "iphone-17", Room: frontdoor.Config{AdmitPerS: rate}}
	p.StartsAt = redisNow(t, door[0].client).Add(time.Hour)

	buyers := make([]string, joiners)
	tickets := make([]string, joiners)
	join := func(from, to int, p frontdoor.Product) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			buyers[i] = fmt.Sprintf("u-%04d", i)
			wg.Go(func() {
				<-start
				w, err := door[i%3].room.Join(ctx, p, buyers[i])
				if assert.NoError(t, err) {
					assert.Equal(t, p.StartsAt.After(w.Now), w.Position == nil, "a position before the doors open, or none after")
					tickets[i] = w.Ticket
				}
			})
		}
		close(start)
		wg.Wait()
	}
	join(0, early, p)
	require.False(t, t.Failed())
	opened := redisNow(t, door[0].client)
	p.StartsAt = opened // the doors open now
	join(early, joiners, p)
	require.False(t, t.Failed())

	// Each buyer polls until admitted, as the room tells it to; its answers are kept.
	var killed atomic.Bool
	answers := make([][]frontdoor.Wait, joiners)
	deadline := time.Now().Add(joiners/rate*time.Second + 20*time.Second)
	var wg sync.WaitGroup
	for i := range joiners {
		wg.Go(func() {
			for next := i; time.Now().Before(deadline); next++ {
				d := next % 3
				if d == 2 && killed.Load() {
					continue // the balancer sends no one to a dead instance
				}
				w, err := door[d].room.Poll(ctx, p, buyers[i], tickets[i])
				if err != nil {
					if d == 2 && killed.Load() {
						continue // in flight as it died: asked again elsewhere
					}
					t.Errorf("poll %s: %v", buyers[i], err)
					return
				}
				answers[i] = append(answers[i], w)
				if w.Admitted {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(w.PollAfter):
				}
			}
		})
	}
	// The admitted count, sampled by Redis's clock through instance 0; instance 2 is killed
	// (its client closed) mid-window.
	var samples []frontdoor.Stats
	for time.Now().Before(deadline) {
		s, err := door[0].room.Stats(ctx, p)
		require.NoError(t, err)
		samples = append(samples, s)
		if !killed.Load() && s.Now.Sub(opened) >= killAt {
			killed.Store(true) // first, so that a poll it fails is asked again elsewhere
			require.NoError(t, door[2].client.Close())
		}
		if s.Now.Sub(opened) > warmUp+window+100*time.Millisecond {
			break
		}
		time.Sleep(50 * time.Millisecond) // the sampling period of a measurement, not a wait for an event
	}
	wg.Wait()
	require.True(t, killed.Load(), "instance 2 was never killed")

	// The rate, by the servers' clock: from the counter, and from the admission times buyers saw.
	from := sort.Search(len(samples), func(i int) bool { return samples[i].Now.Sub(opened) >= warmUp })
	require.Less(t, from, len(samples), "no sample after the warm-up")
	to := sort.Search(len(samples), func(i int) bool { return samples[i].Now.Sub(samples[from].Now) >= window })
	require.Less(t, to, len(samples), "no sample a window after the first")
	s1, s2 := samples[from], samples[to]
	measured := float64(s2.Admitted-s1.Admitted) / s2.Now.Sub(s1.Now).Seconds()
	assert.InDelta(t, rate, measured, rate/10, "admitted %.0f a second across three instances (%d in %v), want %d ± 10%%: admission must run at the deployment's rate",
		measured, s2.Admitted-s1.Admitted, s2.Now.Sub(s1.Now), rate)
	t.Logf("the counter: %d admitted in %v, %.1f a second", s2.Admitted-s1.Admitted, s2.Now.Sub(s1.Now), measured)
	seen := 0
	type admission struct {
		place int64
		at    time.Time
	}
	var admissions []admission
	for i, ws := range answers {
		require.NotEmpty(t, ws, "%s was never answered", buyers[i])
		last := ws[len(ws)-1]
		require.True(t, last.Admitted, "a ticket was lost: %s never admitted", buyers[i])
		for j, w := range ws {
			require.Equal(t, last.Place, w.Place, "%s's place changed", buyers[i])
			if j > 0 {
				require.LessOrEqual(t, *w.Position, *ws[j-1].Position, "%s's position rose", buyers[i])
			}
			if !w.Admitted {
				require.False(t, w.Now.After(last.AdmittedAt), "%s was told to wait after its admission", buyers[i])
			}
		}
		require.False(t, last.Now.Before(last.AdmittedAt), "%s was admitted before the counter passed it", buyers[i])
		require.Equal(t, i < early, last.Place <= early, "%s joined %s the start, yet has place %d", buyers[i], map[bool]string{true: "before", false: "after"}[i < early], last.Place)
		if !last.AdmittedAt.Before(s1.Now) && last.AdmittedAt.Before(s2.Now) {
			seen++
		}
		admissions = append(admissions, admission{last.Place, last.AdmittedAt})
	}
	t.Logf("the buyers: %d admitted in that window, by the admission times they were told", seen)
	assert.InDelta(t, rate, float64(seen)/s2.Now.Sub(s1.Now).Seconds(), rate/10,
		"buyers saw %d admitted in %v: admission must run at the deployment's rate", seen, s2.Now.Sub(s1.Now))
	sort.Slice(admissions, func(i, j int) bool { return admissions[i].place < admissions[j].place })
	for i, a := range admissions {
		require.EqualValues(t, i+1, a.place, "places are not 1..%d, once each", joiners)
		if i > 0 {
			require.False(t, a.at.Before(admissions[i-1].at), "place %d admitted before place %d: out of line order", a.place, a.place-1)
		}
	}
}
