package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseScript is the release every Redis lock of this project uses (redsync's, and the
// sources'): the value is compared and the key deleted in one atomic step, so nothing can
// happen between the two.
var releaseScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// unlockRace is the release race of the Redis lock: A checks that the lock is its own (GET),
// the lock expires, B takes it, A deletes it (DEL) — B's lock. The sources give the four steps
// and the Lua release as the fix; here A's pause between the steps is made certain, the same
// pause in both forms, so every round meets the window.
func unlockRace() Experiment {
	return Experiment{
		Name:  "unlock-race",
		Seed:  "«Locks in practice», why unlocking needs a Lua script; «Choosing a lock», the Redis lock's release",
		Claim: "Releasing a Redis lock by GET, then DEL deletes another client's lock when it expires between the two; the compare-and-delete script cannot.",
		Fix:   `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end`,
		Run:   runUnlockRace,
	}
}

func runUnlockRace(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	rounds := pick(env.Size, 3, 20)
	ttl := 100 * time.Millisecond
	forms := []struct {
		name    string
		release func(ctx context.Context, key, value string, pause func()) error
	}{
		{"GET, then DEL", func(ctx context.Context, key, value string, pause func()) error {
			got, err := env.Redis.Get(ctx, key).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if got != value {
				return nil
			}
			pause() // the lock is ours at the GET; it expires now, and B takes it
			return env.Redis.Del(ctx, key).Err()
		}},
		{"compare-and-delete script", func(ctx context.Context, key, value string, pause func()) error {
			pause() // as slow a holder, in the same place: the check is inside the script
			return releaseScript.Run(ctx, env.Redis, []string{key}, value).Err()
		}},
	}
	var outcomes [2]Outcome
	var chart = Chart{Title: fmt.Sprintf("Other clients' locks deleted, of %d releases", rounds), Unit: "locks"}
	for i, f := range forms {
		deleted, taken := 0, 0
		for r := range rounds {
			key := env.key("unlock-race", fmt.Sprintf("%d-%d", i, r))
			ok, err := env.Redis.SetNX(ctx, key, "A", ttl).Result()
			if err != nil || !ok {
				return Result{}, fmt.Errorf("A's lock %s: %v, %w", key, ok, err)
			}
			// B takes the lock the moment it expires, and works on for a long time. B gives up
			// after 20 TTLs: a lock that never expired would say so in the count.
			pause := func() {
				for deadline := time.Now().Add(20 * ttl); time.Now().Before(deadline) && ctx.Err() == nil; {
					ok, err := env.Redis.SetNX(ctx, key, "B", 10*time.Second).Result()
					if err != nil {
						return
					}
					if ok {
						taken++
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			if err := f.release(ctx, key, "A", pause); err != nil {
				return Result{}, err
			}
			holder, err := env.Redis.Get(ctx, key).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return Result{}, err
			}
			if holder != "B" {
				deleted++ // B still believes it holds the lock; anyone can take it now
			}
			env.Redis.Del(ctx, key)
		}
		// The fix holds only if it was put to the test: B had the lock inside every release.
		outcomes[i] = Outcome{Form: f.name, Failed: deleted > 0 || (i == 1 && taken < rounds),
			Happened: fmt.Sprintf("A's lock expired and B took it inside A's release in %d of %d rounds; A deleted B's lock in %d of %d rounds", taken, rounds, deleted, rounds)}
		chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: float64(deleted), Failed: deleted > 0})
	}
	return Result{Failing: outcomes[0], Fixed: outcomes[1], Chart: chart}, nil
}

// setnxExpire is the lock taken with two commands, SETNX then EXPIRE: a holder that stops
// between them (crashed, killed, its connection gone) leaves a key without a TTL, and the lock
// is never free again. SET with NX and PX sets both in one command.
func setnxExpire() Experiment {
	return Experiment{
		Name:  "setnx-expire",
		Seed:  "«Which lock», the Redis lock from setnx and expire",
		Claim: "SETNX then EXPIRE, with the holder gone between them, leaves a lock without expiry that blocks the SKU for good; SET NX PX frees it after the TTL.",
		Fix:   `client.SetNX(ctx, key, value, ttl) // SET key value NX PX ttl: value and expiry in one command`,
		Run:   runSetnxExpire,
	}
}

func runSetnxExpire(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	bound := pick(env.Size, 1500*time.Millisecond, 10*time.Second)
	ttl := pick(env.Size, 300*time.Millisecond, 2*time.Second)
	forms := []struct {
		name string
		take func(key string) error // what the holder sent before it stopped
	}{
		{"SETNX, then EXPIRE (holder gone between)", func(key string) error {
			return env.Redis.SetNX(ctx, key, "holder", 0).Err() // EXPIRE never comes
		}},
		{"SET NX PX (one command)", func(key string) error {
			return env.Redis.SetNX(ctx, key, "holder", ttl).Err()
		}},
	}
	var out [2]Outcome
	chart := Chart{Title: fmt.Sprintf("Time until another client got the lock (bound %s)", bound), Unit: "s"}
	for i, f := range forms {
		key := env.key("setnx-expire", fmt.Sprint(i))
		if err := f.take(key); err != nil {
			return Result{}, err
		}
		left, err := env.Redis.PTTL(ctx, key).Result()
		if err != nil {
			return Result{}, err
		}
		waited, got, err := waitFor(ctx, bound, 10*time.Millisecond, func() (bool, error) {
			return env.Redis.SetNX(ctx, key, "next", time.Second).Result()
		})
		env.Redis.Del(ctx, key)
		if err != nil {
			return Result{}, err
		}
		ttlSaid := fmt.Sprintf("TTL %s", left.Round(time.Millisecond))
		if left < 0 {
			ttlSaid = "no TTL"
		}
		o := Outcome{Form: f.name}
		if got {
			o.Happened = fmt.Sprintf("key left with %s; the next client got the lock after %.2f s", ttlSaid, waited.Seconds())
		} else {
			o.Happened = fmt.Sprintf("key left with %s; no client got the lock in %.1f s: the SKU is blocked until someone deletes the key by hand", ttlSaid, bound.Seconds())
		}
		o.Failed = !got
		out[i] = o
		chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: waited.Seconds(), Failed: !got})
	}
	return Result{Failing: out[0], Fixed: out[1], Chart: chart}, nil
}

// waitFor tries try every interval until it succeeds or bound has passed, and returns how long
// that took.
func waitFor(ctx context.Context, bound, interval time.Duration, try func() (bool, error)) (time.Duration, bool, error) {
	start := time.Now()
	for {
		ok, err := try()
		if err != nil || ok {
			return time.Since(start), ok, err
		}
		if time.Since(start) >= bound {
			return time.Since(start), false, nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false, ctx.Err()
		case <-time.After(interval):
		}
	}
}
