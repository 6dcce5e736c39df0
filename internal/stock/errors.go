package stock

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"

	gosqlite "github.com/glebarez/go-sqlite"
	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// MySQL/MariaDB server error numbers the store acts on.
const (
	mysqlDuplicateKey     = 1062
	mysqlLockWaitTimeout  = 1205 // a lock wait ran out; also MariaDB's answer to FOR UPDATE NOWAIT on a locked row
	mysqlDeadlock         = 1213 // also Galera's answer to a COMMIT that lost certification to another node's write: nothing written
	mysqlLockNowait       = 3572 // MySQL 8's answer to FOR UPDATE NOWAIT on a locked row
	mysqlTooManyConns     = 1040
	mysqlServerShutdown   = 1053
	mysqlUnknownDatabase  = 1049
	sqliteBusy            = 5
	sqliteLocked          = 6
	sqliteConstraint      = 19
	sqlitePrimaryCodeMask = 0xff // extended result codes keep the primary code in the low byte
)

// Answers of a database not ready to serve (a node outside its cluster, a failover): unavailable
// (503), never internal: a retry on another node may succeed. After a COMMIT: outcome unknown.
const (
	mysqlNodeNotReady      = 1047 // Galera: "WSREP has not yet prepared node for application use"
	mysqlErrorDuringCommit = 1180 // Galera: the writeset was not replicated (the node left its group mid-COMMIT)
	mysqlQueryInterrupted  = 1317 // Galera: a statement interrupted as the node left its group
	mysqlReadOnly          = 1290 // --read-only: a replica not yet promoted, a primary being demoted
	mysqlReadOnlyMode      = 1836 // MySQL 8's super_read_only
	mysqlConnectionKilled  = 1927 // the server ended the session: a shutdown, a node leaving its group
)

// errDuplicate is a unique-key violation; the driver's message names the index or columns.
type errDuplicate struct{ err error }

func (e *errDuplicate) Error() string { return "duplicate key: " + e.err.Error() }
func (e *errDuplicate) Unwrap() error { return e.err }

// isDuplicate reports whether err is a unique-key violation.
func isDuplicate(err error) bool {
	_, ok := errors.AsType[*errDuplicate](err)
	return ok
}

// classify turns driver errors into the domain's sentinels where the domain has a meaning for
// them: lock-wait and NOWAIT failures are ErrBusy, lost connections ErrUnavailable, unique
// violations *errDuplicate. Anything else passes through unchanged.
func classify(err error) error {
	if err == nil || classified(err) {
		return err
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case mysqlDuplicateKey:
			return &errDuplicate{err: err}
		case mysqlLockWaitTimeout, mysqlLockNowait:
			return Busy(BusyRowLocked, err)
		case mysqlDeadlock:
			return Busy(BusyDeadlock, err)
		case mysqlTooManyConns, mysqlServerShutdown, mysqlUnknownDatabase, mysqlNodeNotReady, mysqlErrorDuringCommit,
			mysqlQueryInterrupted, mysqlReadOnly, mysqlReadOnlyMode, mysqlConnectionKilled:
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	var lite *gosqlite.Error
	if errors.As(err, &lite) {
		switch lite.Code() & sqlitePrimaryCodeMask {
		case sqliteBusy, sqliteLocked:
			return Busy(BusyRowLocked, err)
		case sqliteConstraint:
			if strings.Contains(lite.Error(), "UNIQUE") || strings.Contains(lite.Error(), "PRIMARY KEY") {
				return &errDuplicate{err: err}
			}
		}
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	var netErr net.Error
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.As(err, &netErr) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// classified reports whether err already carries a domain meaning, so that classifying it again
// (a transaction classifies what its body returned) keeps that meaning.
func classified(err error) bool {
	return isDuplicate(err) || slices.ContainsFunc([]error{ErrNotFound, ErrSoldOut, ErrAlreadyPurchased, ErrBusy,
		ErrUnavailable, ErrInvalid, ErrIdempotencyConflict, ErrDuplicateRequest, ErrVersionConflict, ErrFencedOut},
		func(sentinel error) bool { return errors.Is(err, sentinel) })
}
