package stock

import "errors"

// BusyCause names why an answer was busy (429): the label of seckill_busy_total and the cause in
// its debug log. docs/operations.md says what an operator does about each.
type BusyCause string

// The causes of a busy answer. Only the first two are a wait budget run out.
const (
	// BusyLockWait: the wait for the lock (pessimistic: the row) ran out of its budget.
	BusyLockWait BusyCause = "lock_wait"
	// BusyInFlight: a request with the same Idempotency-Key is in flight and did not settle.
	BusyInFlight BusyCause = "in_flight"
	// BusyLockLost: the section's lock was lost before it wrote: nothing written.
	BusyLockLost BusyCause = "lock_lost"
	// BusyFencedOut: a newer lock holder had written; this holder's write was refused.
	BusyFencedOut BusyCause = "fenced_out"
	// BusyConflicts: the guarded write lost to another writer as often as it may try.
	BusyConflicts BusyCause = "version_conflicts"
	// BusyRowLocked: the database refused the row: NOWAIT on a locked row, a lock wait run out.
	BusyRowLocked BusyCause = "row_locked"
	// BusyDeadlock: a deadlock's victim, or a failed certification on a multi-primary cluster.
	BusyDeadlock BusyCause = "deadlock"
	// BusyTxEnded: the database, still serving, ended the transaction (idle past its bound).
	BusyTxEnded BusyCause = "tx_ended"
	// BusyHeld: admission has too few units, but orders in flight may give some back.
	BusyHeld BusyCause = "held"
	// BusyWaiting: queued: the product has as many orders waiting to be written as allowed.
	BusyWaiting BusyCause = "waiting"
	// BusyQueueFull: queued: the order queue refused the message.
	BusyQueueFull BusyCause = "queue_full"
	// BusyNoAdmission: queued: Redis admission cannot be asked, and no order goes without it.
	BusyNoAdmission BusyCause = "no_admission"
)

// Busy is err as a busy answer (errors.Is(_, ErrBusy)) with its cause.
func Busy(cause BusyCause, err error) error { return &busyError{cause: cause, err: err} }

type busyError struct {
	cause BusyCause
	err   error
}

func (e *busyError) Error() string { return string(e.cause) + ": " + e.err.Error() }

func (e *busyError) Unwrap() []error { return []error{ErrBusy, e.err} }

// CauseOfBusy names the cause of a busy answer: the first one given (Busy), else what the
// error says. "other" is a busy answer no site named: a defect to fix.
func CauseOfBusy(err error) BusyCause {
	var b *busyError
	switch {
	case errors.As(err, &b):
		return b.cause
	case errors.Is(err, ErrDuplicateRequest):
		return BusyInFlight
	case errors.Is(err, ErrVersionConflict):
		return BusyConflicts
	}
	return "other"
}
