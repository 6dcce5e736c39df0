package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/freezepoint"
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
	// far: true stops the victim at once, the moment it holds what the test is about. Nil: the
	// victim stops itself at its freeze point (SECKILL_FREEZE_AT, package freezepoint), and the
	// stop is timed by its own clock.
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
	// unavailable counts the 503s every process answered, retried: no backend is down in a
	// freeze, so each is a refusal the service misnamed.
	unavailable int
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
				a, _, ok := b.buy(user, func(int) instance { return target }, func(_ instance, a answer, err error) {
					if err == nil && a.status == http.StatusServiceUnavailable {
						mu.Lock()
						res.unavailable++
						mu.Unlock()
					}
				})
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
	if f.catch == nil {
		res.frozen = frozeItself(t, victim)
	} else {
		for until := time.Now().Add(2 * time.Second); time.Now().Before(until) && !f.catch(accepted()); {
		}
		res.frozen = time.Now()
		require.NoError(t, syscall.Kill(victim.pid, syscall.SIGSTOP))
	}
	frozen.Store(&res.frozen)
	res.accepted = accepted()
	f.beforeWake(heldWhileStopped(t, backendtest.Redis(t), f.sku, victim.pid, res.frozen.Add(f.pause)))
	res.woke = time.Now()
	resumed.Store(true)
	require.NoError(t, syscall.Kill(victim.pid, syscall.SIGCONT))
	stopping.Store(true)
	wg.Wait()
	return res
}

// frozeItself waits until p has stopped itself at its freeze point (freezepoint.At: its log
// says so, then it is seen stopped) and returns when it stopped, by its own clock.
func frozeItself(t *testing.T, p instance) time.Time {
	t.Helper()
	require.Eventually(t, func() bool { return len(p.log.said("freezing")) > 0 && processState(t, p.pid) == 'T' },
		time.Minute, 5*time.Millisecond, "the process never reached its freeze point")
	at, err := time.Parse(time.RFC3339Nano, p.log.said("freezing")[0]["time"].(string))
	require.NoError(t, err)
	return at
}

// processState is the state letter of process pid in /proc (T: stopped).
func processState(t *testing.T, pid int) byte {
	t.Helper()
	p, err := procfs.NewProc(pid)
	require.NoError(t, err)
	st, err := p.Stat()
	require.NoError(t, err)
	return st.State[0]
}

// freezeMoments are the moments at which each strategy that locks in the request may freeze
// holding what the other instances wait for (package freezepoint): admitted reservations, the
// lock before the write, the row updated in an open transaction, the lock after the commit, a
// heartbeat half done. Pessimistic's lock is the row: locked and updated are its two moments.
var freezeMoments = map[string][]freezepoint.Point{
	"hybrid":      {freezepoint.Admitted, freezepoint.Locked, freezepoint.Updated, freezepoint.Committed, freezepoint.Beat},
	"etcd":        {freezepoint.Locked, freezepoint.Updated, freezepoint.Committed},
	"zookeeper":   {freezepoint.Locked, freezepoint.Updated, freezepoint.Committed},
	"dblock":      {freezepoint.Locked, freezepoint.Updated, freezepoint.Committed},
	"pessimistic": {freezepoint.Locked, freezepoint.Updated},
}

// TestProcessesFrozenAtEachMoment freezes one of three processes at each moment of its work in
// turn (freezeMoments), mid-sale, every process selling to clients of its own: the process stops
// itself there (SIGSTOP, package freezepoint), so the moment is exact, not the one a probe
// happened to catch. Whatever it holds must end while it is stopped, each bound at once — the
// lock's expiry, the idle-transaction bound, the heartbeat — not one after another: the others
// sell again within 3 s, measured from the time the frozen process logged to the times the
// others' sections placed their orders (created_at). No process answers 503 — no backend is
// down: a transaction the database ended under the frozen process is busy, retried — and the
// invariant holds when it wakes.
func TestProcessesFrozenAtEachMoment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the service and runs its processes; skipped with -short")
	}
	bin := buildService(t)
	zk := backendtest.ZooKeeperEnv(t)
	first, last := startProcess(t, bin, zk...), startProcess(t, bin, zk...)
	const pause = 5 * time.Second
	for _, strategy := range lockedStrategies {
		for _, moment := range freezeMoments[strategy] {
			t.Run(strategy+"/"+string(moment), func(t *testing.T) {
				offered(t, strategy)
				after := "100" // mid-sale: a hundred passes of the moment
				if moment == freezepoint.Beat {
					after = "3" // a beat every half second
				}
				victim := startProcess(t, bin, append(slices.Clone(zk), "SECKILL_FREEZE_AT="+string(moment), "SECKILL_FREEZE_AFTER="+after)...)
				defer victim.kill()
				sku := putOnSale(t, first, 1_000_000)
				s := sellAcrossStop(t, []instance{first, victim, last}, freeze{victim: 1, sku: sku, strategy: strategy, pause: pause, at: 1,
					on: func(c int) int { return c % 3 }, beforeWake: func([]string) {}})
				stall := longestGap(timesOf(t, s.elsewhere, placedAt(t, backendtest.SQL(t), sku)), s.frozen, s.woke)
				t.Logf("%s frozen at %s for %s: longest stall of the others %s (their sections' times); %d orders, %d by the others; its buyers in flight heard %v when it woke; %d answers 503",
					strategy, moment, pause, stall.Round(10*time.Millisecond), len(s.acked), len(s.elsewhere), s.late, s.unavailable)
				backendtest.RequireInvariant(t, backendtest.Store(t), sku, s.acked)
				assert.Less(t, stall, 3*time.Second, "the others sold again within 3 s")
				assert.Zero(t, s.unavailable, "answered 503 with no backend down")
			})
		}
	}
}

// TestProcessesFrozenAtRandom stops (SIGSTOP) one of three processes at a random moment of a
// sale that all three sell, under every strategy that locks in the request, as an operator's
// freeze lands: wherever it falls, the others sell again within 3 s by their sections' times,
// nobody answers 503, and the invariant holds. One freeze per strategy a run: `-count 10` gives
// the ten in a row that a change to what a frozen process holds is judged by.
func TestProcessesFrozenAtRandom(t *testing.T) {
	procs := startThree(t)
	const pause = 5 * time.Second
	for _, strategy := range lockedStrategies {
		t.Run(strategy, func(t *testing.T) {
			offered(t, strategy)
			sku := putOnSale(t, procs[0], 1_000_000)
			delay := rand.N(500 * time.Millisecond)
			var selling time.Time
			s := sellAcrossStop(t, procs, freeze{victim: 1, sku: sku, strategy: strategy, pause: pause, at: 1,
				on: func(c int) int { return c % len(procs) },
				catch: func(int) bool {
					if selling.IsZero() {
						selling = time.Now()
					}
					return time.Since(selling) >= delay
				},
				beforeWake: func([]string) {}})
			stall := longestGap(timesOf(t, s.elsewhere, placedAt(t, backendtest.SQL(t), sku)), s.frozen, s.woke)
			t.Logf("%s: frozen %s into the sale for %s: longest stall of the others %s (their sections' times); %d orders, %d by the others; its buyers in flight heard %v when it woke; %d answers 503",
				strategy, delay.Round(time.Millisecond), pause, stall.Round(10*time.Millisecond), len(s.acked), len(s.elsewhere), s.late, s.unavailable)
			backendtest.RequireInvariant(t, backendtest.Store(t), sku, s.acked)
			assert.Less(t, stall, 3*time.Second, "the others sold again within 3 s")
			assert.Zero(t, s.unavailable, "answered 503 with no backend down")
		})
	}
}
