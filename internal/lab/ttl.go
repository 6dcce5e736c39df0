package lab

import (
	"context"
	"fmt"
	"time"
)

// ttl is 坑一 (pitfall one) of «Locks in practice» (docs/sources.md): a Redis lock whose TTL is
// shorter than the critical section (the database slowed down). The lock expires under its holder,
// a second holder comes in, both read the same stock and both sell it: the first write is written
// over. «Locks in practice»'s fix is the watchdog, which extends the lock while its holder lives;
// this project's answer is also the version check, which holds with or without it. All three forms
// run the same sale — two instances, the section slowed past the TTL by injected latency — behind
// the same Redis admission (redisLock): each fix differs from the failing form in one mechanism,
// the watchdog or the version check. With admission in front the orders never outnumber the stock,
// so the failure is judged where it lands, in the database's stock column (stock.Store.Audit).
func ttl() Experiment {
	return Experiment{
		Name: "ttl",
		Seed: "«Locks in practice», 坑一 (pitfall one): a 5 s Redis lock, a database slower than that, two holders, oversold",
		Claim: "A lock TTL shorter than the critical section lets two holders in, and the lock alone writes one's sale over the other's; " +
			"a watchdog that extends the lock prevents it, and the version check holds either way. Every form here is behind hybrid's Redis admission.",
		Fix: `h.watchdog = lock.Watch(ctx, key, l.opts.Extend, h.extend, l.obs) // redislock.go: Extend every period; and guard.go's UPDATE ... WHERE version = ?`,
		Run: runTTL,
	}
}

func runTTL(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	lockTTL := pick(env.Size, 200*time.Millisecond, 300*time.Millisecond)
	// The section outlasts the TTL by twice the TTL at least: the second holder has that long to
	// be granted the lock and read before the first writes, even on a loaded machine.
	latency := pick(env.Size, 600*time.Millisecond, 700*time.Millisecond)
	units := pick(env.Size, int64(8), int64(20))
	buyers := 3 * int(units)
	forms := []struct {
		name              string
		guarded, watchdog bool
	}{
		{"admission, then unguarded-redis's write; no watchdog", false, false},
		{"admission, then unguarded-redis's write; the watchdog", false, true},
		{"hybrid: admission, then the version check; no watchdog", true, false},
	}
	chart := Chart{Title: fmt.Sprintf("Units sold that never left the stock column: lock TTL %s, critical section %s", lockTTL, latency), Unit: "units"}
	said := make([]string, len(forms))
	broken := make([]bool, len(forms))
	for i, f := range forms {
		// Without the watchdog the experiment is about two holders at once: a sale that never
		// let a second one in (its orders all admitted on one instance, or the second granted
		// only after the first wrote, on a loaded machine) tested nothing, and runs again.
		var (
			s         sale
			most      int
			conflicts float64
			tries     int
		)
		for tries = 1; ; tries++ {
			var err error
			s, most, conflicts, err = ttlSale(ctx, env, f.guarded, f.watchdog, lockTTL, latency, env.key("ttl", fmt.Sprint(i, "-", tries)), units, buyers)
			if err != nil {
				return Result{}, err
			}
			if f.watchdog || most >= 2 {
				break
			}
			if tries == ttlTries {
				return Result{}, fmt.Errorf("%s: no two holders at once in %d sales: the expired lock was never taken over", f.name, tries)
			}
		}
		broken[i] = !s.audit.Consistent()
		said[i] = fmt.Sprintf("%d orders of %d units, %d answered sold out, %d busy or failed; %s; up to %d sections at once, %.0f version conflicts",
			s.ok, units, s.soldOut, s.other, column(s.audit), most, conflicts)
		if tries > 1 {
			said[i] += fmt.Sprintf(" (sale %d: the sales before let no second holder in)", tries)
		}
		chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: float64(unrecorded(s.audit)), Failed: broken[i]})
	}
	return Result{
		Failing: Outcome{Form: forms[0].name, Happened: said[0], Failed: broken[0]},
		Fixed: Outcome{Form: "the watchdog; the version check",
			Happened: "with the watchdog: " + said[1] + ". With the version check and no watchdog: " + said[2],
			Failed:   broken[1] || broken[2]},
		Chart: chart,
	}, nil
}

// ttlTries bounds the sales a form without the watchdog runs until two holders were in at once.
const ttlTries = 3

// ttlSale runs one form's sale of units to buyers on two instances, each section held for
// latency past a lock of lockTTL: what it sold, the most sections at once, and the version
// conflicts counted.
func ttlSale(ctx context.Context, env *Env, guarded, watchdog bool, lockTTL, latency time.Duration, sku string, units int64, buyers int) (sale, int, float64, error) {
	var o overlaps
	cfg := labConfig("hybrid")
	cfg.LockTTL, cfg.LockWait = lockTTL, 5*time.Second
	// One admission call per buyer, so the units go to both instances' buyers as they arrive:
	// batched, one instance's call can take every unit left, its buyers queue behind its own
	// lock, and no second holder ever comes in.
	cfg.AdmitBatch = 1
	if !watchdog {
		cfg.LockExtend = time.Hour // never extended: the TTL is all the holder has
	}
	cfg.Hooks.InSection = o.hold(latency)
	var (
		locks  []*redisLock
		places []placer
	)
	for range 2 {
		l, err := env.newRedisLock(ctx, env.config(cfg))
		if err != nil {
			return sale{}, 0, 0, err
		}
		defer l.close()
		locks = append(locks, l)
		places = append(places, l.place(guarded))
	}
	if err := locks[0].putProduct(ctx, sku, units); err != nil {
		return sale{}, 0, 0, err
	}
	s, err := sell(ctx, env, places, sku, buyers)
	if err != nil {
		return sale{}, 0, 0, err
	}
	var conflicts float64
	for _, l := range locks {
		conflicts += l.counter("seckill_optimistic_retries_total")
	}
	return s, o.max(), conflicts, nil
}
