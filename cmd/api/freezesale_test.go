package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/stock"
)

// freeze is a sale that stops one process near its end (sellAcrossStop), as the hybrid and the
// queued end-of-sale tests run it.
type freeze struct {
	victim        int
	sku, strategy string
	on            func(client int) int // the process a client buys on, for the whole sale
	at            int                  // orders accepted before the victim may be stopped
	// catch is polled, for up to 2 s once at orders are accepted, with the orders accepted so
	// far: true stops the victim at once, the moment it holds what the test is about.
	catch func(accepted int) bool
	pause time.Duration
	// paced has each client wait about 200 ms between its buyers once the victim is stopped,
	// so that the others sell the units left in a second or two, not at once.
	paced bool
	// beforeWake runs just before the victim is resumed, with the reservations it was seen
	// holding while stopped (heldWhileStopped): what the stop caught.
	beforeWake func(held []string)
}

// stopped is what the buyers of a freeze sale saw.
type stopped struct {
	acked     []stock.Order // every order a buyer heard 201 or 202 for
	elsewhere []string      // of them, those the other processes answered
	late      map[int]int   // final answers, by status, of the victim's buyers in flight when it stopped
	accepted  int           // orders accepted when it stopped
	frozen    time.Time     // when it was stopped
	woke      time.Time     // when it was resumed
}

// sellAcrossStop sells f.sku to 64 clients, each on one process, until f's victim has been
// stopped and resumed. Once f.at orders are accepted, the victim is stopped (SIGSTOP) the moment
// f.catch says so, or after 2 s, for f.pause — its clients hang with it, as a frozen instance's
// do — while its reservations are watched. Then every buyer finishes the purchase it is on, the
// victim's too, each with the one HTTP buyer, so every 201 and 202 is accounted for.
func sellAcrossStop(t *testing.T, procs []instance, f freeze) stopped {
	t.Helper()
	const clients = 64
	b := buyer{t: t, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second},
		sku: f.sku, strategy: f.strategy}
	var cancel context.CancelFunc
	b.ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	victim := procs[f.victim]
	var (
		mu       sync.Mutex
		res      = stopped{late: map[int]int{}}
		wg       sync.WaitGroup
		stopping atomic.Bool
		frozen   atomic.Pointer[time.Time]
		resumed  atomic.Bool
		reached  = make(chan struct{})
	)
	accepted := func() int { mu.Lock(); defer mu.Unlock(); return len(res.acked) }
	for c := range clients {
		target := procs[f.on(c)]
		wg.Go(func() {
			for n := 0; !stopping.Load(); n++ {
				user := fmt.Sprintf("c%02d-%05d", c, n)
				first := time.Now()
				a, _, ok := b.buy(user, func(int) instance { return target }, nil)
				if !ok {
					return
				}
				mu.Lock()
				if at := frozen.Load(); target.pid == victim.pid && at != nil && first.Before(*at) && resumed.Load() {
					res.late[a.status]++
				}
				if a.status == http.StatusCreated || a.status == http.StatusAccepted {
					res.acked = append(res.acked, stock.Order{OrderID: a.order.OrderID, UserID: user})
					if target.pid != victim.pid {
						res.elsewhere = append(res.elsewhere, a.order.OrderID)
					}
					if len(res.acked) == f.at {
						close(reached)
					}
				}
				mu.Unlock()
				if f.paced && frozen.Load() != nil {
					// The pace of the buyers once it is stopped, not a wait for an event.
					time.Sleep(150*time.Millisecond + rand.N(100*time.Millisecond))
				}
			}
		})
	}
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatalf("%d orders were not accepted within a minute", f.at)
	}
	for until := time.Now().Add(2 * time.Second); time.Now().Before(until) && !f.catch(accepted()); {
	}
	res.frozen = time.Now()
	frozen.Store(&res.frozen)
	require.NoError(t, syscall.Kill(victim.pid, syscall.SIGSTOP))
	res.accepted = accepted()
	f.beforeWake(heldWhileStopped(t, backendtest.Redis(t), f.sku, victim.pid, res.frozen.Add(f.pause)))
	res.woke = time.Now()
	resumed.Store(true)
	require.NoError(t, syscall.Kill(victim.pid, syscall.SIGCONT))
	stopping.Store(true)
	wg.Wait()
	return res
}
