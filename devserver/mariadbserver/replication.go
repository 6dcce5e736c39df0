package mariadbserver

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/flashsale/seckill/devserver/freeport"
)

// NewReplicated lays out a primary and its replica under dir, from one fresh data directory, not
// started. With semisync, the primary answers a COMMIT only once the replica has acknowledged its
// events (AFTER_SYNC), and waits for that for an hour rather than fall back to asynchronous
// replication after MariaDB's default 10 s — a fallback that silently brings the lost writes back.
func NewReplicated(dir string, semisync bool) (primary, replica *Server, err error) {
	ports, err := freeport.Ports(2)
	if err != nil {
		return nil, nil, err
	}
	primary = &Server{Port: ports[0], Dir: filepath.Join(dir, "primary"), Args: []string{"--server-id=1", "--log-bin=binlog", "--binlog-format=ROW"}}
	replica = &Server{Port: ports[1], Dir: filepath.Join(dir, "replica"), Args: []string{"--server-id=2", "--log-bin=binlog", "--relay-log=relay"}}
	if semisync {
		primary.Args = append(primary.Args, "--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
			"--rpl-semi-sync-master-timeout=3600000")
		replica.Args = append(replica.Args, "--rpl-semi-sync-slave-enabled=ON")
	}
	if err := install(primary.data()); err != nil {
		return nil, nil, err
	}
	if err := replica.copyData(primary); err != nil {
		return nil, nil, err
	}
	return primary, replica, nil
}

// Replicate has the server replicate from source (host:port: the primary, or a fault proxy in
// front of it, to cut the link), from the primary's first event on, retrying a lost connection
// every second.
func (s *Server) Replicate(ctx context.Context, source string) error {
	host, port, err := net.SplitHostPort(source)
	if err != nil {
		return err
	}
	return s.Exec(ctx, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='root', MASTER_PASSWORD='', "+
		"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", host, port), "START SLAVE")
}

// WaitCaughtUp waits, for at most bound, until the replica s has applied everything primary has
// written so far.
func (s *Server) WaitCaughtUp(ctx context.Context, primary *Server, bound time.Duration) error {
	pdb, err := sql.Open("mysql", primary.DSN(""))
	if err != nil {
		return err
	}
	defer pdb.Close()
	var pos string
	if err := pdb.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return err
	}
	rdb, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer rdb.Close()
	var done int
	if err := rdb.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, bound.Seconds()).Scan(&done); err != nil {
		return err
	}
	if done != 0 {
		return fmt.Errorf("the replica on %s did not reach the primary's position %s within %s", s.Addr(), pos, bound)
	}
	return nil
}

// WaitSemiSync waits, for at most bound, until the primary s has a replica that acknowledges its
// commits.
func (s *Server) WaitSemiSync(bound time.Duration) error {
	return s.poll(bound, "had no semi-synchronous replica", func(ctx context.Context) bool {
		st, err := s.Status(ctx, "Rpl_semi_sync_master_status")
		n, cerr := s.Status(ctx, "Rpl_semi_sync_master_clients")
		return err == nil && cerr == nil && st == "ON" && n != "0"
	})
}

// Promote makes the replica s a primary: it stops replicating and forgets its source, as a
// failover does once the primary is gone.
func (s *Server) Promote(ctx context.Context) error {
	return s.Exec(ctx, "STOP SLAVE", "RESET SLAVE ALL")
}
