package admission

import (
	"context"
	"time"

	"github.com/flashsale/seckill/internal/planted"
)

// Cooldown is how long the breaker keeps Redis unasked after an error: an outage costs one
// timeout per cooldown, not one per order, and the next order after it probes Redis again.
const Cooldown = time.Second

// instancesKey is the heartbeats of every instance on this Redis (beat.lua).
const instancesKey = "seckill:instances"

// Beat records that this instance is alive for another TTL (lua/beat.lua): its reservations
// keep their units while its beats are at most the TTL apart.
func (a *Ledger) Beat(ctx context.Context) {
	if err := beatScript.Run(ctx, a.client, []string{instancesKey}, a.instance, a.ttl.Milliseconds()).Err(); err != nil && ctx.Err() == nil {
		a.log.Debug("heartbeat not written; past the instance TTL the others sweep this instance's reservations", "err", err)
	}
}

// Live returns the instances alive now (lua/live.lua), this one whatever its last beat (it sweeps
// its own itself), and the order queue (QueueOwner: its writers resolve its reservations).
func (a *Ledger) Live(ctx context.Context) ([]string, error) {
	ids, err := liveScript.Run(ctx, a.client, []string{instancesKey}).StringSlice()
	if planted.On(planted.EveryoneAlive) {
		ids, err = a.client.ZRange(ctx, instancesKey, 0, -1).Result()
	}
	if err != nil {
		return nil, err
	}
	return append(ids, a.instance, QueueOwner), nil
}

// Available reports whether the breaker lets requests reach Redis.
func (a *Ledger) Available() bool { return a.opts.Clock().UnixNano() >= a.downUntil.Load() }

// Down trips the breaker after a Redis error at step (the strategy's lock, too): until the
// cooldown ends, admission answers ErrRedisDown without I/O.
func (a *Ledger) Down(step string, err error) {
	if a.Available() {
		a.log.Warn("redis unavailable: orders take the database-guarded path", "step", step, "cooldown", Cooldown, "err", err)
	}
	a.downUntil.Store(a.opts.Clock().Add(Cooldown).UnixNano())
}

// FellBack counts an order placed without Redis, by the step that found it down.
func (a *Ledger) FellBack(step string) { a.fallbacks.WithLabelValues(step).Inc() }
