package lab

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/flashsale/seckill/internal/redisserver"
)

// redlockValidity is the Redlock algorithm's validity: a lock taken on a majority of N
// independent Redis nodes is held for its TTL minus the time taking it took, minus a drift for
// the clocks. Here two of five nodes are slow (their writes held for half the TTL), so taking
// the lock costs most of the TTL; a client that then works for its planned section still works
// when the keys on the majority expire, and another client takes the quorum beside it.
//
// redsync v4 does half of the algorithm: lockContext computes until = now + TTL - elapsed -
// TTL*driftFactor and refuses a lock whose until has passed (ErrFailed), and Mutex.Until returns
// it. Bounding the work by it is left to the caller: that is the fix.
func redlockValidity() Experiment {
	return Experiment{
		Name:  "redlock-validity",
		Seed:  "«Choosing a lock» and «Which lock», the Redlock algorithm: validity = TTL - elapsed - drift",
		Claim: "A Redlock client that works for its planned section after a slow acquisition still works when its keys expire on the majority, and another client holds the lock beside it; one that starts only a section shorter than TTL - elapsed - drift never overlaps.",
		Fix:   `if time.Until(m.Until())-2*time.Millisecond < section { m.Unlock(); /* take it again */ }`,
		Run:   runRedlockValidity,
	}
}

// redlockNodes is N of the algorithm; the quorum is N/2+1.
const redlockNodes = 5

func runRedlockValidity(ctx context.Context, env *Env) (Result, error) {
	if err := redisserver.Available(); err != nil {
		return Result{}, &NotRun{Why: err.Error()}
	}
	ttl := pick(env.Size, 500*time.Millisecond, 2*time.Second)
	rounds := pick(env.Size, 2, 5)
	slow := ttl / 2         // how long the slow nodes hold the lock's SET
	section := ttl * 8 / 10 // the work the client plans under the lock
	dir, err := os.MkdirTemp("", "seckill-redlock-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	servers, err := redisserver.Start(dir, redlockNodes)
	if err != nil {
		return Result{}, err
	}
	defer redisserver.Kill(servers...)
	var pools []redsyncredis.Pool
	for _, s := range servers {
		// go-redis's default: context deadlines do not cut socket I/O, so redsync's per-node
		// timeout (TTL*timeoutFactor) does not cut a slow node short, and the acquisition waits
		// for it — as it waits for any node that answers late.
		c := s.Client()
		defer c.Close()
		pools = append(pools, goredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	r := &redlockRun{rs: rs, slowNodes: servers[redlockNodes-2:], ttl: ttl, slow: slow, section: section}

	forms := []struct {
		name, label string
		// bounded: the section starts only when the lock's validity covers it
		bounded bool
	}{
		{fmt.Sprintf("works its %s section whatever the validity", section), "overlap: validity ignored", false},
		{"starts the section only within TTL - elapsed - drift, else takes the lock again", "overlap: section within validity", true},
	}
	chart := Chart{Title: fmt.Sprintf("Redlock on %d nodes, 2 of them slow: TTL %s, averages over %d rounds", redlockNodes, ttl, rounds), Unit: "ms"}
	var out [2]Outcome
	for i, f := range forms {
		var took, left, overlap time.Duration
		late := -ttl // the latest a section ended, after its lock's validity
		overlapRounds, retakes := 0, 0
		for round := range rounds {
			m, err := r.round(ctx, env.key("redlock-validity", fmt.Sprintf("%d-%d", i, round)), f.bounded)
			if err != nil {
				return Result{}, err
			}
			took, left, overlap, late = took+m.took, left+m.left, overlap+m.overlap, max(late, m.late)
			retakes += m.retakes
			if m.overlap > 0 {
				overlapRounds++
			}
		}
		n := time.Duration(rounds)
		// The failure is the overlap; the fix must also never run a section past its validity,
		// which the other client's polling could miss.
		o := Outcome{Form: f.name, Failed: overlapRounds > 0 || (f.bounded && late > 0)}
		if i == 0 {
			o.Happened = fmt.Sprintf("taking the lock took %s on average, leaving a validity of %s for a %s section; the section ran up to %s past its lock's validity, and another client took the quorum while it worked in %d of %d rounds, overlapping for %s on average",
				(took / n).Round(time.Millisecond), (left / n).Round(time.Millisecond), section.Round(time.Millisecond), late.Round(time.Millisecond), overlapRounds, rounds, (overlap / n).Round(time.Millisecond))
			chart.Bars = append(chart.Bars,
				Bar{Label: "acquisition with 2 slow nodes", Value: float64((took / n).Milliseconds())},
				Bar{Label: "validity left (redsync's Until)", Value: float64((left / n).Milliseconds())},
				Bar{Label: "section planned", Value: float64(section.Milliseconds()), Failed: section > left/n})
		} else {
			refused, err := r.lateRefused(ctx, env.key("redlock-validity", "late"))
			if err != nil {
				return Result{}, err
			}
			o.Happened = fmt.Sprintf("the slow acquisition left a validity of %s on average for the %s section: it let go and took the lock again %d times in %d rounds; its sections ended %s or more before their validity ran out; overlaps in %d of %d rounds. redsync itself refuses a lock whose quorum came after its TTL: %s",
				(left / n).Round(time.Millisecond), section.Round(time.Millisecond), retakes, rounds, (-late).Round(time.Millisecond), overlapRounds, rounds, refused)
		}
		chart.Bars = append(chart.Bars, Bar{Label: f.label, Value: float64((overlap / n).Milliseconds()), Failed: overlapRounds > 0})
		out[i] = o
	}
	return Result{Failing: out[0], Fixed: out[1], Chart: chart}, nil
}

// redlockRun is one run's nodes and sizes.
type redlockRun struct {
	rs                 *redsync.Redsync
	slowNodes          []*redisserver.Server
	ttl, slow, section time.Duration
}

// redlockRound is what one round measured.
type redlockRound struct {
	took, left time.Duration // the first acquisition, and the validity it left
	overlap    time.Duration // how long the two clients' sections ran together
	late       time.Duration // how far A's section ran past its lock's validity (<= 0: it did not)
	retakes    int           // acquisitions let go for too short a validity
}

// round: client A takes the lock while two nodes are slow and works its section; client B, from
// the moment A had the lock, tries for it every 5 ms and holds it for a tenth of the TTL once it
// has it. The overlap is the time both were inside their sections.
func (r *redlockRun) round(ctx context.Context, name string, bounded bool) (redlockRound, error) {
	var m redlockRound
	for _, s := range r.slowNodes {
		if err := s.Pause(ctx, r.slow); err != nil {
			return m, err
		}
	}
	start := time.Now()
	a := r.rs.NewMutex(name, redsync.WithExpiry(r.ttl), redsync.WithTries(1))
	if err := a.LockContext(ctx); err != nil {
		return m, fmt.Errorf("A's lock %s: %w", name, err)
	}
	m.took, m.left = time.Since(start), time.Until(a.Until())

	type span struct{ from, to time.Time }
	got := make(chan span, 1)
	go func() {
		deadline := time.Now().Add(4 * r.ttl)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			b := r.rs.NewMutex(name, redsync.WithExpiry(r.ttl), redsync.WithTries(1))
			if b.TryLockContext(ctx) == nil {
				from := time.Now()
				time.Sleep(r.ttl / 10)
				to := time.Now()
				_, _ = b.UnlockContext(context.WithoutCancel(ctx))
				got <- span{from, to}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		got <- span{}
	}()

	// The algorithm's drift is TTL*0.01 + 2 ms; redsync's Until takes off the TTL*0.01
	// (driftFactor), and the 2 ms for the clocks' resolution are taken off here.
	for bounded && time.Until(a.Until())-2*time.Millisecond < r.section {
		_, _ = a.UnlockContext(context.WithoutCancel(ctx))
		m.retakes++
		if m.retakes > 5 {
			return m, fmt.Errorf("A's lock %s: no validity of %s in 5 acquisitions", name, r.section)
		}
		a = r.rs.NewMutex(name, redsync.WithExpiry(r.ttl), redsync.WithTries(32))
		if err := a.LockContext(ctx); err != nil {
			return m, fmt.Errorf("A's lock %s, again: %w", name, err)
		}
	}
	from := time.Now()
	time.Sleep(r.section)
	to := time.Now()
	m.late = to.Sub(a.Until())
	_, _ = a.UnlockContext(context.WithoutCancel(ctx))

	b := <-got
	if !b.from.IsZero() && b.from.Before(to) && from.Before(b.to) {
		m.overlap = min(to.Sub(start), b.to.Sub(start)) - max(from.Sub(start), b.from.Sub(start))
	}
	return m, ctx.Err()
}

// lateRefused pauses the slow nodes past the TTL and tries once: the quorum is reached only
// after the keys on the fast nodes have expired, and redsync must refuse the lock.
func (r *redlockRun) lateRefused(ctx context.Context, name string) (string, error) {
	for _, s := range r.slowNodes {
		if err := s.Pause(ctx, r.ttl*11/10); err != nil {
			return "", err
		}
	}
	start := time.Now()
	err := r.rs.NewMutex(name, redsync.WithExpiry(r.ttl), redsync.WithTries(1)).LockContext(ctx)
	took := time.Since(start)
	if err == nil {
		return "", fmt.Errorf("redsync granted %s although its quorum came after %s, past the TTL", name, took.Round(time.Millisecond))
	}
	return fmt.Sprintf("the quorum came after %s, and LockContext returned %v", took.Round(time.Millisecond), err), nil
}
