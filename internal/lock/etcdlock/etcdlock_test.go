package etcdlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
)

// etcdLocker is what the hand-off benchmark needs of a mutex.
type etcdLocker interface {
	Lock(context.Context) error
	Unlock(context.Context) error
}

// BenchmarkEtcdMutexHandoff measures what a contended etcd mutex costs on the embedded server
// the service ships: two sessions take turns on one key, each acquisition waiting for the other's
// release. ns/op is the time per lock hand-off (lock, empty section, unlock), for etcd's
// concurrency.Mutex and for the strategy's etcdlock.Mutex, whose wait is heard at once:
//
//	SECKILL_TEST_REQUIRE_BACKENDS=1 go test -run '^$' -bench EtcdMutexHandoff -benchtime 200x ./internal/lock/etcdlock
func BenchmarkEtcdMutexHandoff(b *testing.B) {
	for name, newMutex := range map[string]func(*concurrency.Session, string) etcdLocker{
		"concurrency.Mutex": func(s *concurrency.Session, key string) etcdLocker { return concurrency.NewMutex(s, key) },
		"EtcdMutex":         func(s *concurrency.Session, key string) etcdLocker { return etcdlock.New(s, key) },
	} {
		b.Run(name, func(b *testing.B) { benchHandoff(b, newMutex) })
	}
}

func benchHandoff(b *testing.B, newMutex func(*concurrency.Session, string) etcdLocker) {
	ctx := context.Background()
	key := fmt.Sprintf("/bench/handoff/%d", time.Now().UnixNano())
	var sessions []*concurrency.Session
	for range 2 {
		s, err := concurrency.NewSession(backendtest.Etcd(b), concurrency.WithTTL(10))
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		sessions = append(sessions, s)
	}
	var wg sync.WaitGroup
	var n sync.Mutex
	remaining := b.N
	b.ResetTimer()
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n.Lock()
				if remaining == 0 {
					n.Unlock()
					return
				}
				remaining--
				n.Unlock()
				m := newMutex(s, key)
				if err := m.Lock(ctx); err != nil {
					b.Error(err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestEtcdMutexExcludes: sessions taking one key in turns — half with etcdlock.Mutex, half with etcd's
// own concurrency.Mutex, since they share a protocol — never hold it at once, and the fencing
// tokens of successive holders only grow.
func TestEtcdMutexExcludes(t *testing.T) {
	ctx := context.Background()
	key := "/test/excludes/" + backendtest.SKU(t)
	var (
		holders   atomic.Int32
		overlaps  atomic.Int32
		mu        sync.Mutex
		lastFence int64
		fenceBack bool
		wg        sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 6 {
		s, err := concurrency.NewSession(backendtest.Etcd(t), concurrency.WithTTL(10))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 20 {
				var m etcdLocker
				var fence func() int64
				if i%2 == 0 {
					em := etcdlock.New(s, key)
					m, fence = em, func() int64 { return em.Header().Revision }
				} else {
					cm := concurrency.NewMutex(s, key)
					m, fence = cm, func() int64 { return cm.Header().Revision }
				}
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				fenceBack = fenceBack || fence() <= lastFence
				lastFence = fence()
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two holders at once")
	assert.False(t, fenceBack, "a later holder got a smaller fencing token")
}
