package lab

import (
	"context"
	"fmt"
	"time"
)

// ttl is 坑一 of the post-mortem: a Redis lock whose TTL is shorter than the critical section
// (the database slowed down). The lock expires under its holder, a second holder comes in, both
// read the same stock and both sell it. The documents' fix is the watchdog, which extends the
// lock while its holder lives; this project's answer is also the version check, which holds
// with or without it. All three run the same sale: two instances, the section slowed past the
// TTL by injected latency.
func ttl() Experiment {
	return Experiment{
		Name:  "ttl",
		Seed:  "002, 坑一: a 5 s Redis lock, a database slower than that, two holders, oversold",
		Claim: "A lock TTL shorter than the critical section lets two holders in and the lock alone oversells; a watchdog that extends the lock prevents it, and the version check holds either way.",
		Fix:   `section, stop := h.metrics.watchdog(ctx, h.Name(), key, h.opts.Extend, extend) // and UPDATE ... WHERE version = ?`,
		Run:   runTTL,
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
	latency := pick(env.Size, 300*time.Millisecond, 500*time.Millisecond)
	units := pick(env.Size, int64(8), int64(20))
	buyers := 3 * int(units)
	forms := []struct {
		name, strategy string
		watchdog       bool
	}{
		{"unguarded-redis, no watchdog", "unguarded-redis", false},
		{"unguarded-redis, watchdog", "unguarded-redis", true},
		{"hybrid (version check), no watchdog", "hybrid", false},
	}
	chart := Chart{Title: fmt.Sprintf("Units oversold: lock TTL %s, critical section %s", lockTTL, latency), Unit: "units"}
	var said []string
	oversold := make([]int64, len(forms))
	for i, f := range forms {
		var o overlaps
		cfg := labConfig(f.strategy)
		cfg.LockTTL, cfg.LockWait = lockTTL, 5*time.Second
		if !f.watchdog {
			cfg.LockExtend = time.Hour // never extended: the TTL is all the holder has
		}
		cfg.Hooks.InSection = o.hold(latency)
		var insts []*instance
		for range 2 {
			inst, err := env.newInstance(cfg, nil, 0)
			if err != nil {
				return Result{}, err
			}
			defer inst.close()
			insts = append(insts, inst)
		}
		s, err := sell(ctx, insts, env.key("ttl", fmt.Sprint(i)), units, buyers, f.strategy)
		if err != nil {
			return Result{}, err
		}
		oversold[i] = s.audit.Oversold()
		var conflicts float64
		for _, inst := range insts {
			conflicts += inst.counter("seckill_optimistic_retries_total")
		}
		said = append(said, fmt.Sprintf("%d sold of %d (oversold %d), up to %d sections at once, %.0f version conflicts, %d answered busy",
			s.ok, units, oversold[i], o.max(), conflicts, s.other))
		chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: float64(oversold[i]), Failed: oversold[i] > 0})
	}
	return Result{
		Failing: Outcome{Form: forms[0].name, Happened: said[0], Failed: oversold[0] > 0},
		Fixed: Outcome{Form: "the watchdog; the version check",
			Happened: "with the watchdog: " + said[1] + "; with the version check and no watchdog: " + said[2],
			Failed:   oversold[1] > 0 || oversold[2] > 0},
		Chart: chart,
	}, nil
}
