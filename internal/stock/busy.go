package stock

import "errors"

// BusyCause names why an answer was busy (429): the label of seckill_busy_total and the cause in
// its debug log. docs/operations.md says what an operator does about each.
type BusyCause string

// The causes of a busy answer. Only the first two are a wait budget run out; the others say the
// service could not decide in time for another reason.
const (
	// BusyLockWait: the wait for the lock (or, pessimistic, the row) ran out of its budget.
	BusyLockWait BusyCause = "lock_wait"
	// BusyInFlight: a request with the same Idempotency-Key is still in flight and did not
	// settle within the wait budget (or, at admission, is in flight right now).
	BusyInFlight BusyCause = "in_flight"
	// BusyLockLost: the section's lock was lost (an extension refused, a lease or session
	// ended) before it wrote: nothing written.
	BusyLockLost BusyCause = "lock_lost"
	// BusyFencedOut: a newer lock holder had written; this holder's write was refused.
	BusyFencedOut BusyCause = "fenced_out"
	// BusyConflicts: the guarded write lost to another writer of the row as many times as the
	// section may try.
	BusyConflicts BusyCause = "version_conflicts"
	// BusyRowLocked: the database refused the row: NOWAIT on a locked row, a lock wait run out.
	BusyRowLocked BusyCause = "row_locked"
	// BusyDeadlock: the database chose this transaction as a deadlock's victim (or, on a
	// multi-primary cluster, failed its certification).
	BusyDeadlock BusyCause = "deadlock"
	// BusyTxEnded: the database ended the section's transaction — it waited past the
	// idle-transaction bound while this instance was paused, or its session was killed — and
	// still serves.
	BusyTxEnded BusyCause = "tx_ended"
	// BusyHeld: admission has too few units left, but orders in their sections hold some and
	// may give them back: sold out is not final yet.
	BusyHeld BusyCause = "held"
	// BusyWaiting: queued: the product has as many orders waiting to be written as allowed.
	BusyWaiting BusyCause = "waiting"
	// BusyQueueFull: queued: the order queue refused the message.
	BusyQueueFull BusyCause = "queue_full"
	// BusyNoAdmission: queued: Redis admission cannot be asked, and no order is accepted without it.
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
// error says — an Idempotency-Key in flight, a guarded write that kept losing. "other" is a
// busy answer no site named, which is a defect to fix.
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
