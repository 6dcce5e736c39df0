package zklock_test

import (
	"context"
	"net"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/service"
)

// zkSession is a session on the test process's ZooKeeper with the service's session timeout.
func zkSession(t *testing.T) *zk.Conn {
	t.Helper()
	return backendtest.ZooKeeper(t, backendtest.ZooKeeperServers(t), service.Defaults().LockTTL)
}

// TestZKMutexExcludes: six sessions take one lock in turns, twenty times each; no two ever hold
// it at once, and the fencing tokens (creation zxids) of successive holders only grow.
func TestZKMutexExcludes(t *testing.T) {
	ctx := context.Background()
	dir := "/test/excludes/" + backendtest.SKU(t)
	var (
		holders   atomic.Int32
		overlaps  atomic.Int32
		mu        sync.Mutex
		lastToken int64
		tokenBack bool
		wg        sync.WaitGroup
	)
	start := make(chan struct{})
	for range 6 {
		conn := zkSession(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 20 {
				m := zklock.New(conn, dir)
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				tokenBack = tokenBack || m.Token() <= lastToken
				lastToken = m.Token()
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if ok, err := m.Unlock(ctx); err != nil || !ok {
					t.Errorf("unlock: held %v, %v", ok, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two holders at once")
	assert.False(t, tokenBack, "a later holder got a smaller fencing token")
	assert.Positive(t, lastToken)
}

// TestZKMutexWaiterGivesUp: a waiter that gives up removes its node, so it holds up nobody — the
// waiter behind it is granted the lock as soon as the holder lets go — and the queue is a queue:
// each waiter watches only the node below its own.
func TestZKMutexWaiterGivesUp(t *testing.T) {
	ctx := context.Background()
	dir := "/test/gives-up/" + backendtest.SKU(t)
	conn := zkSession(t)
	holder := zklock.New(conn, dir)
	require.NoError(t, holder.Lock(ctx))

	impatient, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := zklock.New(conn, dir).Lock(impatient)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the lock is held: the waiter's wait ran out")

	granted := make(chan error, 1)
	patient := zklock.New(conn, dir)
	go func() { granted <- patient.Lock(ctx) }()
	require.Eventually(t, func() bool {
		children, _, err := conn.Children(dir)
		return err == nil && len(children) == 2
	}, 5*time.Second, 10*time.Millisecond, "the holder's node and the patient waiter's: the impatient one's is gone")

	released := time.Now()
	ok, err := holder.Unlock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case err := <-granted:
		require.NoError(t, err)
		t.Logf("granted %s after the release", time.Since(released))
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter behind a waiter that gave up was not granted the lock")
	}
	assert.Greater(t, patient.Token(), holder.Token())
	_, err = patient.Unlock(ctx)
	require.NoError(t, err)
}

// TestZKMutexAbandonedCreate gives up on lock attempts while their create is on its way — a
// create whose answer the waiter never reads, as when its wait ends or the connection drops
// mid-call. A node made that way is known to nobody and, on a healthy session, would hold the
// lock for ever; the waiter finds it by its guid and deletes it, so the lock stays free.
func TestZKMutexAbandonedCreate(t *testing.T) {
	dir := "/test/abandoned/" + backendtest.SKU(t)
	conn := zkSession(t)
	ctx := context.Background()
	require.NoError(t, zklock.New(conn, dir).Lock(ctx)) // the directory exists: creates go straight to the node
	children, _, err := conn.Children(dir)
	require.NoError(t, err)
	require.NoError(t, conn.Delete(path.Join(dir, children[0]), -1))
	var gaveUp int
	for i := range 20 {
		attempt, cancel := context.WithTimeout(ctx, time.Duration(i)*200*time.Microsecond)
		m := zklock.New(conn, dir)
		if m.Lock(attempt) != nil {
			gaveUp++
		} else {
			_, err := m.Unlock(ctx)
			require.NoError(t, err)
		}
		cancel()
	}
	require.Positive(t, gaveUp, "no attempt gave up: nothing was abandoned")
	require.Eventually(t, func() bool {
		children, _, err := conn.Children(dir)
		return err == nil && len(children) == 0
	}, 5*time.Second, 20*time.Millisecond, "abandoned nodes were removed")
	fresh, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	require.NoError(t, zklock.New(conn, dir).Lock(fresh), "the lock is free again: no orphan holds it")
	t.Logf("%d of 20 attempts gave up mid-create or mid-wait", gaveUp)
}

// TestZKMutexCreateAcrossSessions gives up on a lock attempt whose create went out while the
// client had no session: its session expired, the next not yet made — a frozen instance's first
// section after it wakes. The client sends that create on its next session, and the node it makes
// is an orphan of that session, which would hold the lock for as long as the session lives, every
// instance's sale stopped behind it. The waiter's remover must delete it there.
func TestZKMutexCreateAcrossSessions(t *testing.T) {
	proxy := backendtest.StartFaultProxy(t, backendtest.ZooKeeperServers(t)[0])
	var (
		gate    atomic.Bool // set: the next dial waits for release
		dialing = make(chan struct{}, 1)
		release = make(chan struct{})
	)
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		if gate.CompareAndSwap(true, false) {
			dialing <- struct{}{}
			<-release
		}
		return net.DialTimeout(network, address, timeout)
	}
	conn, events, err := zk.Connect([]string{proxy.Listen}, time.Second, zk.WithDialer(dial), zk.WithLogger(quiet{}), zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.State == zk.StateExpired {
				gate.Store(true) // the dial of the next session: after the client's flush of unsent calls
			}
		}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	go func() {
		for range events {
		}
	}()
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 10*time.Millisecond)

	ctx := context.Background()
	dir := "/test/across-sessions/" + backendtest.SKU(t)
	observer := zkSession(t)
	holder := zklock.New(observer, dir) // keeps the directory, and the queue behind it
	require.NoError(t, holder.Lock(ctx))
	marker := dir + "-session"
	_, err = conn.Create(marker, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	proxy.Stop()
	require.Eventually(t, func() bool {
		exists, _, err := observer.Exists(marker)
		return err == nil && !exists
	}, 10*time.Second, 20*time.Millisecond, "the cut-off session expired")
	require.NoError(t, proxy.Start())
	select {
	case <-dialing:
	case <-time.After(10 * time.Second):
		t.Fatal("the client never dialled for a new session after its expiry")
	}
	attempt, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, zklock.New(conn, dir).Lock(attempt), context.DeadlineExceeded, "no session: the attempt gave up")
	close(release)
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 10*time.Millisecond)

	require.Eventually(t, func() bool {
		children, _, err := observer.Children(dir)
		return err == nil && len(children) == 1
	}, 5*time.Second, 20*time.Millisecond, "the create sent on the new session left no node: the holder's alone")
	_, err = holder.Unlock(ctx)
	require.NoError(t, err)
	fresh, cancelFresh := context.WithTimeout(ctx, 2*time.Second)
	defer cancelFresh()
	require.NoError(t, zklock.New(observer, dir).Lock(fresh), "the lock is free once its holder let go: no orphan holds it")
}

// quiet drops the ZooKeeper client's own log.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
