package lockstrategy

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// releasedChannel carries the key of every hybrid lock just released, to every instance.
const releasedChannel = "seckill:locks:released"

// releases wakes this instance's waiters for a Redis lock the moment its holder — in any
// instance — lets it go, as Redisson's RLock does: the holder publishes the key after its
// release, and a waiter tries again on the message rather than on its next poll. A Redis lock
// has no queue of its own, so without this every hand-off would leave the lock idle for part of
// a polling interval, and under group commit the lock changes hands hundreds of times a second.
// Pub/sub may drop a message (a reconnect, a slow subscriber): polling stays as the fallback, so
// a lost message costs one polling interval, never correctness.
type releases struct {
	rdb redis.UniversalClient
	ps  *redis.PubSub

	mu    sync.Mutex
	woken map[string]chan struct{} // by key: closed at its next release
	done  chan struct{}
}

func newReleases(rdb redis.UniversalClient) *releases {
	r := &releases{rdb: rdb, ps: rdb.Subscribe(context.Background(), releasedChannel),
		woken: map[string]chan struct{}{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for msg := range r.ps.Channel() {
			r.notify(msg.Payload)
		}
	}()
	return r
}

// next returns a channel closed at key's next release. Take it before trying the lock: a
// release between the try and the wait is then not missed.
func (r *releases) next(key string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.woken[key]
	if !ok {
		ch = make(chan struct{})
		r.woken[key] = ch
	}
	return ch
}

func (r *releases) notify(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.woken[key]; ok {
		close(ch)
		delete(r.woken, key)
	}
}

// released tells every instance that key is free. Best effort: waiters also poll.
func (r *releases) released(ctx context.Context, key string) {
	_ = r.rdb.Publish(ctx, releasedChannel, key).Err()
}

// Close ends the subscription.
func (r *releases) Close() error {
	err := r.ps.Close()
	<-r.done
	return err
}
