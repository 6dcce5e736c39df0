// Package zklock is the ZooKeeper lock: the recipe of ephemeral sequential nodes, each waiter
// watching its predecessor, whose node's creation zxid serves as a fencing token (Mutex); the
// strategies' lock.Locker over it (Locker); and the session the service opens ZooKeeper with.
package zklock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/flashsale/seckill/internal/planted"
)

// Mutex is the ZooKeeper lock recipe, as «Locks in practice» and «Choosing a lock» give it
// (docs/sources.md) and as Curator's InterProcessMutex does it, to be read top to bottom:
//
//  1. Every waiter creates an EPHEMERAL|SEQUENTIAL node under the lock's directory,
//     /seckill/locks/<sku>/_c_<guid>-lock-0000000042. Ephemeral: it lives only as long as the
//     session that made it, so a holder that crashes — or stops long enough for its session to
//     expire — lets go by itself. Sequential: ZooKeeper numbers the nodes in the order they were
//     made.
//  2. It lists the directory's children. The lowest number holds the lock.
//  3. Otherwise it watches only the node just below its own (ExistsW on the predecessor) and
//     waits for that one to go, then looks again (step 2). Watching the predecessor and not the
//     directory is what avoids the herd: a release wakes one waiter, not all of them; and it must
//     look again rather than assume it holds, since the predecessor may have left by giving up.
//  4. Release deletes the node (the session's end does the same).
//
// The guid in the name is Curator's "protection": a create whose answer is lost — the
// connection dropped, or the waiter stopped waiting — may still have made the node, and an
// ephemeral node nobody knows of is the lowest one sooner or later and holds the lock for as long
// as the session lives, which a healthy session does for ever. The waiter finds its node by the
// guid and deletes it (orphan).
//
// The node's creation zxid is the fencing token: nodes are created in order, the lowest holds,
// so the zxids of successive holders only grow. A lock alone is not mutual exclusion — a holder
// paused past its session timeout is still running when its successor is granted the lock
// (pitfall two, 坑二, of «Locks in practice»: an 8 s GC pause, a 5 s session) — so the database
// refuses a write whose zxid is older than the last one written.
//
// A Mutex is one acquisition's handle, on a connection that may be shared; two handles on
// the same directory exclude each other even on one connection (each has its own node).
type Mutex struct {
	conn    *zk.Conn
	dir     string
	guid    string // names this waiter's node
	node    string // this waiter's node, once known
	session int64  // the session that created it
	zxid    int64  // its creation zxid: the fencing token
}

// New returns the mutex whose waiters queue under dir.
func New(conn *zk.Conn, dir string) *Mutex {
	return &Mutex{conn: conn, dir: dir, guid: rand.Text()}
}

// seqDigits is the width of the number ZooKeeper appends to a sequential node's name.
const seqDigits = 10

// Lock waits until this handle holds the lock or ctx ends; on failure it removes its node, so
// that it does not hold up the waiters behind it. A dropped connection on the same session is
// waited out (the client reconnects by itself); a lost session ends the wait.
func (m *Mutex) Lock(ctx context.Context) error {
	if err := m.create(ctx); err != nil {
		return err
	}
	for {
		children, err := Call(ctx, func() ([]string, error) {
			c, _, err := m.conn.Children(m.dir)
			return c, err
		})
		if m.reconnecting(ctx, err) {
			continue
		}
		if err != nil {
			return m.abandon(err)
		}
		predecessor, mine := predecessorOf(children, path.Base(m.node))
		if !mine {
			// Our node is gone: the session that made it expired while we waited.
			return m.abandon(fmt.Errorf("lock node %s: %w", m.node, zk.ErrSessionExpired))
		}
		if predecessor == "" {
			return nil // the lowest: ours
		}
		type watched struct {
			exists bool
			events <-chan zk.Event
		}
		w, err := Call(ctx, func() (watched, error) {
			exists, _, events, err := m.conn.ExistsW(path.Join(m.dir, predecessor))
			return watched{exists, events}, err
		})
		if m.reconnecting(ctx, err) {
			continue
		}
		if err != nil {
			return m.abandon(err)
		}
		if !w.exists {
			continue // gone between the listing and the watch: look again
		}
		select {
		case <-w.events: // it went (or the session changed): look again
		case <-ctx.Done():
			return m.abandon(ctx.Err())
		}
	}
}

// reconnecting reports whether err is a dropped connection while the session that made the node
// lives on, and then pauses briefly before the caller tries again.
func (m *Mutex) reconnecting(ctx context.Context, err error) bool {
	if !errors.Is(err, zk.ErrConnectionClosed) || m.conn.SessionID() != m.session || ctx.Err() != nil {
		return false
	}
	select {
	case <-time.After(50 * time.Millisecond):
	case <-ctx.Done():
	}
	return true
}

// create makes this waiter's node, and the directory if it is missing (a container node, which
// ZooKeeper removes once its last child has gone, so finished sales leave nothing behind). A
// create whose answer was lost is looked for by its guid before it is tried again.
func (m *Mutex) create(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		session := m.conn.SessionID()
		created := make(chan createResult, 1)
		go func() {
			node, err := m.conn.Create(m.dir+"/_c_"+m.guid+"-lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			created <- createResult{node, err}
		}()
		var r createResult
		select {
		case r = <-created:
		case <-ctx.Done():
			go m.removeOrphan(created) // the create may still succeed: its node must not stay
			return ctx.Err()
		}
		switch {
		case errors.Is(r.err, zk.ErrNoNode) && attempt <= 3:
			if err := m.createDir(ctx); err != nil {
				return err
			}
			continue
		case errors.Is(r.err, zk.ErrConnectionClosed) && attempt <= 3:
			node, err := m.find(ctx)
			if err != nil {
				go m.removeOrphan(nil)
				return fmt.Errorf("find lock node under %s after a lost create: %w", m.dir, err)
			}
			if node == "" {
				continue // it was not made: try again
			}
			r = createResult{node: node}
		case r.err != nil:
			return fmt.Errorf("create lock node under %s: %w", m.dir, r.err)
		}
		m.node = r.node
		_, stat, err := Call2(ctx, func() (bool, *zk.Stat, error) { return m.conn.Exists(r.node) })
		if err != nil || stat == nil || m.conn.SessionID() != session {
			return m.abandon(fmt.Errorf("lock node %s: %w", r.node, errors.Join(err, zk.ErrSessionExpired)))
		}
		m.session, m.zxid = session, stat.Czxid
		return nil
	}
}

// createResult is what a Create call returned.
type createResult struct {
	node string
	err  error
}

// find looks for this waiter's node among the directory's children, by its guid ("" if none).
func (m *Mutex) find(ctx context.Context) (string, error) {
	children, err := Call(ctx, func() ([]string, error) {
		c, _, err := m.conn.Children(m.dir)
		return c, err
	})
	if err != nil {
		return "", err
	}
	for _, c := range children {
		if strings.Contains(c, m.guid) {
			return m.dir + "/" + c, nil
		}
	}
	return "", nil
}

// orphanTimeout bounds the search for, and the removal of, a node whose create was abandoned.
const orphanTimeout = 30 * time.Second

// removeOrphan deletes the node of a create that was abandoned: once the create call has
// returned (created; nil when it has), whatever it made is deleted — by the name its answer
// gives, else found by the guid — retried while the session that may own it lives. When that
// session ends, so does the node. The session is read once the create has returned: a create
// queued while the client had no session (an expiry, a reconnect) is sent on the next one, and
// its node belongs to that session, which read earlier would look ended already.
func (m *Mutex) removeOrphan(created <-chan createResult) {
	var node string
	session := m.conn.SessionID()
	if created != nil {
		r := <-created // every call returns: an answer, or the error of a lost connection
		node = r.node
		if !planted.On(planted.OrphanSessionFirst) {
			session = m.conn.SessionID()
		}
	}
	deadline := time.After(orphanTimeout)
	for m.conn.SessionID() == session {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var err error
		if node == "" {
			node, err = m.find(ctx)
		}
		if err == nil && node != "" {
			err = callErr(ctx, func() error { return m.conn.Delete(node, -1) })
		}
		cancel()
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			return
		}
	}
}

// createDir creates the lock's directory and its parents.
func (m *Mutex) createDir(ctx context.Context) error {
	parts := strings.Split(strings.Trim(m.dir, "/"), "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		_, err := Call(ctx, func() (string, error) {
			if i == len(parts)-1 {
				return m.conn.CreateContainer(p, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll))
			}
			return m.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

// predecessorOf finds, among the children of the lock's directory, the node just below mine
// ("" when mine is the lowest), and whether mine is there at all. Nodes are ordered by their
// sequence number, the last ten digits of the name (zero-padded: they sort as text).
func predecessorOf(children []string, mine string) (predecessor string, found bool) {
	seq := func(name string) string { return name[max(0, len(name)-seqDigits):] }
	slices.SortFunc(children, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
	for i, c := range children {
		if c == mine {
			if i == 0 {
				return "", true
			}
			return children[i-1], true
		}
	}
	return "", false
}

// abandon removes this waiter's node after a failed wait and returns err. Left there, the node
// would hold up every waiter behind it until its session ends; if the delete does not get
// through at once, it is retried in the background.
func (m *Mutex) abandon(err error) error {
	if m.node != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		derr := callErr(ctx, func() error { return m.conn.Delete(m.node, -1) })
		cancel()
		if derr != nil && !errors.Is(derr, zk.ErrNoNode) {
			go m.removeOrphan(nil)
		}
	}
	return err
}

// Unlock deletes the node. It reports false when the node was already gone: the session that
// held it expired, and the lock may have passed to another. A delete that does not get through
// is retried in the background: until the node goes, it holds the lock.
func (m *Mutex) Unlock(ctx context.Context) (bool, error) {
	err := callErr(ctx, func() error { return m.conn.Delete(m.node, -1) })
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, nil
	case err != nil:
		go m.removeOrphan(nil)
		return false, err
	}
	return true, nil
}

// Held reports whether the lock is still this handle's: its session is the current one and its
// node is there. Between this check and a write, the fencing token is what stops a holder whose
// session expires.
func (m *Mutex) Held(ctx context.Context) bool {
	if m.conn.SessionID() != m.session || m.conn.State() != zk.StateHasSession {
		return false
	}
	exists, _, err := Call2(ctx, func() (bool, *zk.Stat, error) { return m.conn.Exists(m.node) })
	return err == nil && exists
}

// Token is the fencing token: the creation zxid of the node that holds the lock.
func (m *Mutex) Token() int64 { return m.zxid }

// Call runs a ZooKeeper call, which takes no context, and gives up waiting for it when ctx
// ends (the call itself ends with the connection's own timeouts).
func Call[T any](ctx context.Context, call func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Call2 is Call for calls with two results and an error.
func Call2[A, B any](ctx context.Context, call func() (A, B, error)) (A, B, error) {
	type pair struct {
		a A
		b B
	}
	p, err := Call(ctx, func() (pair, error) {
		a, b, err := call()
		return pair{a, b}, err
	})
	return p.a, p.b, err
}

// callErr is Call for calls that return only an error.
func callErr(ctx context.Context, call func() error) error {
	_, err := Call(ctx, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// Dial connects to a ZooKeeper ensemble for the strategy: one session of
// sessionTimeout (the server bounds it to its own min and max: 2 and 20 ticks by default), its
// events logged, the client's own logging sent to slog at debug level. It waits up to
// sessionTimeout for the first session; the client then keeps reconnecting by itself, and after
// an expiry makes a new session.
func Dial(servers []string, sessionTimeout time.Duration, log *slog.Logger) (*zk.Conn, error) {
	conn, events, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(logger{log}), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zookeeper %v: %w", servers, err)
	}
	deadline := time.After(max(sessionTimeout, 2*time.Second))
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go watchSession(events, log)
				return conn, nil
			}
		case <-deadline:
			go watchSession(events, log)
			log.Warn("zookeeper has no session yet; the zookeeper strategy answers busy until it has one", "servers", servers)
			return conn, nil
		}
	}
}

// watchSession logs the session's changes: an expiry means every lock node of the old session
// is gone.
func watchSession(events <-chan zk.Event, log *slog.Logger) {
	for ev := range events {
		switch ev.State {
		case zk.StateExpired:
			log.Warn("zookeeper session expired; its lock nodes are gone, a new session follows")
		case zk.StateDisconnected:
			log.Debug("zookeeper disconnected; reconnecting", "server", ev.Server)
		}
	}
}

// logger sends the ZooKeeper client's own messages to slog.
type logger struct{ log *slog.Logger }

func (l logger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "zookeeper")
}
