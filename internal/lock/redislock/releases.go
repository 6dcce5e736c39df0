package redislock

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/stock"
)

// releasedChannel carries the key of every hybrid lock just released, to every instance, and
// after it (a newline between) the product as the holder's section left it, when it knows.
const releasedChannel = "seckill:locks:released"

// releases wakes this instance's waiters for a Redis lock the moment its holder — in any
// instance — lets it go, as Redisson's RLock does: the holder publishes the key after its
// release, and a waiter tries again on the message rather than on its next poll. A Redis lock
// has no queue of its own, so without this every hand-off would leave the lock idle for part of
// a polling interval, and under group commit the lock changes hands hundreds of times a second.
// Pub/sub may drop a message (a reconnect, a slow subscriber): polling stays as the fallback, so
// a lost message costs one polling interval, never correctness.
//
// The message also hands the product over to the next holder, as its last writer left it, so
// that the next section need not read the row first (lock.Lock.Known): with three
// instances taking turns, that read is one of the few round trips every section waits for. The
// version check makes a stale or lost hand-over harmless.
type releases struct {
	rdb redis.UniversalClient
	ps  *redis.PubSub

	mu    sync.Mutex
	woken map[string]chan struct{} // by key: closed at its next release
	known map[string]stock.Product // by key: the product as the latest section left it
	done  chan struct{}
}

// maxKnown bounds how many products releases remembers; past it they are forgotten, which costs
// each a read.
const maxKnown = 4096

func newReleases(rdb redis.UniversalClient) *releases {
	r := &releases{rdb: rdb, ps: rdb.Subscribe(context.Background(), releasedChannel),
		woken: map[string]chan struct{}{}, known: map[string]stock.Product{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for msg := range r.ps.Channel() {
			key, product, _ := strings.Cut(msg.Payload, "\n")
			var p stock.Product
			if product != "" && json.Unmarshal([]byte(product), &p) == nil {
				r.remember(key, p)
			}
			r.notify(key)
		}
	}()
	return r
}

// remember keeps p as key's product unless a later version is known: versions only grow.
func (r *releases) remember(key string, p stock.Product) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.known[key]; ok && old.Version >= p.Version {
		return
	}
	if len(r.known) >= maxKnown {
		clear(r.known)
	}
	r.known[key] = p
}

// product is key's product as the latest section known here left it, or nil.
func (r *releases) product(key string) *stock.Product {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.known[key]; ok {
		return &p
	}
	return nil
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

// released tells every instance that key is free, and how the section left its product (nil:
// it cannot say). Best effort: waiters also poll, and sections also read.
func (r *releases) released(ctx context.Context, key string, left *stock.Product) {
	payload := key
	if left != nil {
		r.remember(key, *left)
		if b, err := json.Marshal(left); err == nil {
			payload += "\n" + string(b)
		}
	}
	_ = r.rdb.Publish(ctx, releasedChannel, payload).Err()
}

// Close ends the subscription.
func (r *releases) Close() error {
	err := r.ps.Close()
	<-r.done
	return err
}
