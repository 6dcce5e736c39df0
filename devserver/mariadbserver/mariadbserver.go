// Package mariadbserver runs throwaway MariaDB servers as processes of Debian's packages
// (apt-get install -y mariadb-server; galera-4 and mariadb-backup for a cluster), on free
// loopback ports, for the tests (internal/backendtest) and the lab: one server, a primary with
// its replica, a Galera cluster. A fault test or an experiment needs servers it can SIGKILL and
// start again on their data, which the machine's shared server is not.
package mariadbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashsale/seckill/devserver/freeport"
	"github.com/flashsale/seckill/devserver/process"
)

// Available says why no server can be started here, or nil.
func Available() error {
	for _, bin := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install -y mariadb-server): %w", bin, err)
		}
	}
	return nil
}

// Server is one mariadbd process on its own port and data directory.
type Server struct {
	Port int
	Dir  string   // its data (Dir/data), socket, pid file and error log
	Args []string // options beyond the base ones, for every start
	proc process.Proc
}

// New initialises a data directory under dir (mariadb-install-db; root with an empty password,
// over TCP too) on a free loopback port and returns the server, not started; args are its own
// options (replication, wsrep).
func New(dir string, args ...string) (*Server, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return nil, err
	}
	s := &Server{Port: ports[0], Dir: dir, Args: args}
	if err := install(s.data()); err != nil {
		return nil, err
	}
	return s, nil
}

// install writes a fresh data directory. Small redo logs: the default 96 MB is what most of a
// copy of it would be.
func install(data string) error {
	out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=8M").CombinedOutput()
	if err != nil {
		return fmt.Errorf("mariadb-install-db: %w: %s", err, out)
	}
	return nil
}

func (s *Server) data() string { return filepath.Join(s.Dir, "data") }

// Addr is the server's client address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// DSN is root's DSN for database db ("": none) on the server, with parseTime.
func (s *Server) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "root", "tcp", s.Addr(), db, true
	cfg.Timeout = 2 * time.Second
	return cfg.FormatDSN()
}

// Running reports whether the server was started and not stopped since.
func (s *Server) Running() bool { return s.proc.Running() }

// Start starts the server with extra options beyond its own for this start only (a cluster's
// bootstrap, a recovered position), and waits until it answers.
func (s *Server) Start(extra ...string) error {
	if err := s.launch(extra...); err != nil {
		return err
	}
	return s.waitAnswers(60 * time.Second)
}

func (s *Server) launch(extra ...string) error {
	args := append([]string{"--no-defaults", "--datadir=" + s.data(), "--user=root",
		"--port=" + strconv.Itoa(s.Port), "--bind-address=127.0.0.1", "--socket=" + filepath.Join(s.Dir, "sock"),
		"--pid-file=" + filepath.Join(s.Dir, "pid"), "--log-error=" + s.errorLog(),
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M", "--max-connections=300"}, s.Args...)
	return s.proc.Start(exec.Command("mariadbd", append(args, extra...)...))
}

func (s *Server) errorLog() string { return filepath.Join(s.Dir, "error.log") }

// waitAnswers waits until the server answers a query, for at most bound.
func (s *Server) waitAnswers(bound time.Duration) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	return s.poll(bound, "did not answer", func(ctx context.Context) bool {
		return db.PingContext(ctx) == nil
	})
}

// poll asks done every 50 ms until it says so, for at most bound; then it fails with what, and
// the end of the server's error log.
func (s *Server) poll(bound time.Duration, what string, done func(ctx context.Context) bool) error {
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok := done(ctx)
		cancel()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd on %s %s within %s; its log ends:\n%s", s.Addr(), what, bound, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logTail is the last lines of the server's error log.
func (s *Server) logTail() string {
	log, _ := os.ReadFile(s.errorLog())
	return string(log[max(0, len(log)-3000):])
}

// Kill stops the server abruptly (SIGKILL), as a crash would: what it had not written is lost.
func (s *Server) Kill() { s.proc.Kill() }

// Stop shuts the server down (SIGTERM) as its operator would, and waits.
func (s *Server) Stop() { s.proc.Stop(30 * time.Second) }

// Exec runs statements on the server as root, in order, on one connection.
func (s *Server) Exec(ctx context.Context, stmts ...string) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// Status reads one status variable of the server (SHOW STATUS).
func (s *Server) Status(ctx context.Context, name string) (string, error) {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return "", err
	}
	defer db.Close()
	var n, v string
	// Not a placeholder: SHOW cannot be prepared. name is one of the caller's constants.
	if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE '"+name+"'").Scan(&n, &v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("no status variable %s", name)
		}
		return "", err
	}
	return v, nil
}

// copyData copies the data directory of from into s's, for a server that starts from the same
// state (a cluster's members, a replica).
func (s *Server) copyData(from *Server) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", from.data(), s.data()).CombinedOutput(); err != nil {
		return fmt.Errorf("copy data dir: %w: %s", err, out)
	}
	return nil
}

// Kill kills servers (SIGKILL).
func Kill(servers ...*Server) {
	for _, s := range servers {
		if s != nil {
			s.Kill()
		}
	}
}
