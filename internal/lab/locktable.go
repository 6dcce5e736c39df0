package lab

import (
	"context"
	"fmt"
	"time"
)

// lockTableNoExpiry is the lock table of the sources (docs/sources.md) without its expiry column: a unique key
// taken by INSERT and released by DELETE (stock.Store.InsertLock and Unlock). A holder that dies
// before its DELETE leaves the row, and every INSERT after it fails — for good. The project's
// lock table (stock.Store.TryLock) has an expiry and reclaims an expired row with one
// conditional UPDATE.
func lockTableNoExpiry() Experiment {
	return Experiment{
		Name:  "locktable-noexpiry",
		Seed:  "«Which lock», the lock table's first problem (no expiry: a failed unlock is a deadlock); «Choosing a lock», its expire_at column",
		Claim: "A lock table without expiry stays locked after its holder dies; with an expiry and an atomic reclaim, another holder has it after the TTL.",
		Fix:   `UPDATE distributed_locks SET holder = ?, expire_at = ? WHERE lock_name = ? AND expire_at < NOW(6)`,
		Run:   runLockTableNoExpiry,
	}
}

func runLockTableNoExpiry(ctx context.Context, env *Env) (Result, error) {
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	bound := pick(env.Size, 1500*time.Millisecond, 10*time.Second)
	ttl := pick(env.Size, 500*time.Millisecond, 2*time.Second)
	forms := []struct {
		name    string
		tryLock func(ctx context.Context, name, holder string) (bool, error)
	}{
		{"no expiry (INSERT to lock, DELETE to unlock)", env.Store.InsertLock},
		{fmt.Sprintf("expiry %s, atomic reclaim", ttl), func(ctx context.Context, name, holder string) (bool, error) {
			return env.Store.TryLock(ctx, name, holder, ttl)
		}},
	}
	var out [2]Outcome
	chart := Chart{Title: fmt.Sprintf("Time until another holder got the lock after the first died (bound %s)", bound), Unit: "s"}
	for i, f := range forms {
		name := env.key("locktable", fmt.Sprint(i))
		ok, err := f.tryLock(ctx, name, "holder-1")
		if err != nil || !ok {
			return Result{}, fmt.Errorf("first holder of %s: %v, %w", name, ok, err)
		}
		// holder-1 dies here: its DELETE never comes.
		tries := 0
		waited, got, err := waitFor(ctx, bound, 20*time.Millisecond, func() (bool, error) {
			tries++
			return f.tryLock(ctx, name, "holder-2")
		})
		freed := false // by a DELETE by hand, once the wait is over
		if err == nil && !got {
			if _, err = env.Store.Unlock(ctx, name, "holder-1"); err == nil {
				freed, err = f.tryLock(ctx, name, "holder-2")
			}
		}
		for _, h := range []string{"holder-1", "holder-2"} {
			_, _ = env.Store.Unlock(context.WithoutCancel(ctx), name, h)
		}
		if err != nil {
			return Result{}, err
		}
		o := Outcome{Form: f.name, Failed: !got}
		if got {
			o.Happened = fmt.Sprintf("the next holder reclaimed the lock after %.2f s", waited.Seconds())
		} else {
			o.Happened = fmt.Sprintf("deadlocked: no other holder in %.1f s, %d tries refused; a DELETE of the dead holder's row by hand, and the next try took it (%t)",
				bound.Seconds(), tries, freed)
		}
		out[i] = o
		chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: waited.Seconds(), Failed: !got})
	}
	return Result{Failing: out[0], Fixed: out[1], Chart: chart}, nil
}
