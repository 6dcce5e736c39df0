// Package freezepoint stops this process (SIGSTOP) at one named moment of its work, so that a
// test can freeze an instance exactly where it holds what the others wait for: a lock, a row, a
// transaction, reservations. It acts only in a build with the freezepoints tag, and only at the
// moment SECKILL_FREEZE_AT names; in every other build At is empty and compiled away.
package freezepoint

// Point names a moment of an instance's work.
type Point string

// The moments a test may freeze an instance at.
const (
	// Admitted: hybrid's orders admitted in Redis, their units reserved, before their section.
	Admitted Point = "admitted"
	// Locked: the section's lock held (pessimistic: the row locked) and the product read,
	// before the write — the moment of the strategies' InSection hook.
	Locked Point = "locked"
	// Updated: inside the write's transaction, the product's row updated, before the orders are
	// inserted and the transaction commits: the row lock held by an open transaction.
	Updated Point = "updated"
	// Committed: the write committed, the section's lock not yet released.
	Committed Point = "committed"
	// Beat: the database has answered the heartbeat's check, the heartbeat not yet written.
	Beat Point = "beat"
)
