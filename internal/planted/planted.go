// Package planted names the bugs that the project's checks exist to catch, so that a test can
// plant each one and see its check fail (TestChecksCatchPlantedBugs): a check that cannot fail
// proves nothing. A bug is planted only in a build with the plantedbugs tag, and only while
// SECKILL_PLANTED_BUG names it; in every other build On is false at compile time and the bug's
// code is not in the binary.
package planted

// Bug is one planted bug, by the name SECKILL_PLANTED_BUG gives it.
type Bug string

// The bugs, each beside the guard it removes.
const (
	// BlindWrite: the version-guarded write (hybrid, dblock) writes the stock it computed from
	// its read, with no version and no stock condition: the lost update of the incident.
	BlindWrite Bug = "blind-write"
	// NoFence: the fenced write (etcd, zookeeper) drops its fencing condition and never reads
	// the fence, so a holder whose lease or session expired takes a refused write for a version
	// conflict, reads again, and writes after its successor.
	NoFence Bug = "no-fence"
	// NoWatchdog: a held lock is never extended, so a long section loses it at its TTL.
	NoWatchdog Bug = "no-watchdog"
	// LostGiveBack: a failed order's Redis reservation is never given back by its request.
	LostGiveBack Bug = "lost-give-back"
	// NoSweep: the sweeper never returns a reservation, so units of an order that was never
	// written stay off sale.
	NoSweep Bug = "no-sweep"
	// EveryoneAlive: the sweeper takes every instance that ever beat for alive, so a frozen or
	// dead instance's reservations hold their units for as long as it stays away.
	EveryoneAlive Bug = "everyone-alive"
	// DoubleReturn: ending an order (cancel, expiry) drops its status condition, so an order
	// that ended already gives its units back again.
	DoubleReturn Bug = "double-return"
	// UnrecordedAccepted: a queued publisher answers 202 for an order whose record it could not
	// write (the queue's server died after the publish), so a sweeper may give up an order its
	// buyer was told accepted.
	UnrecordedAccepted Bug = "unrecorded-accepted"
	// UnreadKey: a queued publisher accepts an order without reading whether a written order
	// carries its Idempotency-Key, so the repeat of an ended order's POST is answered 202 with a
	// second order.
	UnreadKey Bug = "unread-key"
	// UncheckedWriter: a queued writer places the orders it is handed without reading their
	// batch's record first, so an order a sweeper gave up (its units already back on sale) is
	// placed too.
	UncheckedWriter Bug = "unchecked-writer"
	// KeyAcrossUsers: the request an Idempotency-Key names leaves out the buyer, so another
	// buyer's request under the key is answered the first buyer's order.
	KeyAcrossUsers Bug = "key-across-users"
	// SettleWithoutTakeBack: the settle of an order written after the sweeper returned its
	// reservation does not take the unit and the buyer again, so admission offers a unit the
	// database has sold.
	SettleWithoutTakeBack Bug = "settle-without-take-back"
	// IgnoredWaitingBound: queued admission ignores the bound on a product's waiting orders, so
	// an order may wait behind any number of others.
	IgnoredWaitingBound Bug = "ignored-waiting-bound"
	// HeldAtOnce: a buyer who finds the units left held by orders in their sections hears busy
	// at once, before the wait budget, though those orders decide within milliseconds.
	HeldAtOnce Bug = "held-at-once"
	// AnyRejectionGivenUp: a queued publisher that finds an order of its batch rejected before
	// its own record takes a writer's rejection for a sweeper's and answers 503, though the order
	// was accepted.
	AnyRejectionGivenUp Bug = "any-rejection-given-up"
	// NoneGivenUp: a queued publisher that finds its batch given up by a sweeper answers 202 for
	// orders no writer will ever take.
	NoneGivenUp Bug = "none-given-up"
	// LongHeartbeat: an instance's heartbeat lasts 20 s (the default InstanceTTL is 2 s), so the
	// reservations of a frozen instance stay its own far longer than the 3 s No frozen sale
	// promises: the last units of a sale wait for it to wake.
	LongHeartbeat Bug = "long-heartbeat"
	// LongAckWait: the queue leaves a message with a writer for 20 s (the default AckWait is
	// 5 s), longer than a freeze, so the orders a killed or frozen writer held wait 20 s for
	// another, past the 10 s in which every 202 ends.
	LongAckWait Bug = "long-ack-wait"
	// NowaitAsWait: the pessimistic section's FOR UPDATE loses its NOWAIT, so a held row parks
	// a session per section in its lock queue instead of failing fast.
	NowaitAsWait Bug = "nowait-as-wait"
	// PartialCheckout: a checkout's lines are written each in a transaction of its own, so a
	// line refused after the first ones leaves them placed: half a checkout.
	PartialCheckout Bug = "partial-checkout"
	// RequestOrder: a checkout's products are taken in the order its request lists them, not in
	// SKU order, so two checkouts that cross (A then B against B then A) wait for each other.
	RequestOrder Bug = "request-order"
	// BeatsWithoutDatabase: an instance beats whether or not its database serves, so one cut
	// off from its database (its cluster node died) keeps its reservations' units off sale.
	BeatsWithoutDatabase Bug = "beats-without-database"
	// NoDrain: an instance told to stop closes its connections at once (http.Server.Close)
	// instead of draining them (Shutdown), so the requests it holds lose their answers.
	NoDrain Bug = "no-drain"
	// AuditCountsWritten: the audit counts every reservation the order queue holds as queued,
	// written or not, so an order written and not yet settled counts as an order and as queued.
	AuditCountsWritten Bug = "audit-counts-written"
	// CheckoutFoundByLine: a queued writer looks for a redelivered checkout in the database by
	// its first line's order id, where the rows bear the checkout's reservation, so a placed
	// checkout that comes again is rejected behind its buyer's rows.
	CheckoutFoundByLine Bug = "checkout-found-by-line"
	// RejectedUnitsHeld: nothing gives back the reservation of an order recorded rejected whose
	// writer's give-back missed Redis, so its units stay in the queue's hands for ever.
	RejectedUnitsHeld Bug = "rejected-units-held"
	// EndedAsUnavailable: a transaction the database ended — idle past its bound while its
	// instance was paused — is answered 503 unavailable, as if the database were down, though it
	// serves: buyers and operators hear of an outage that is not there.
	EndedAsUnavailable Bug = "ended-as-unavailable"
	// SoldOutUnderLock: the strategies with no admission in front of their lock take it for a
	// sold-out product too, so its late buyers queue for the lock (on Galera: conflict at COMMIT,
	// busy) to hear an answer one read of the row gives.
	SoldOutUnderLock Bug = "sold-out-under-lock"
	// AckedUndecided: a queued writer acks a batch once the orders of its first section are
	// decided, before the others of the batch are: a writer killed then loses them — answered
	// 202, never written, never rejected.
	AckedUndecided Bug = "acked-undecided"
	// AcceptedUnstored: a queued publisher answers its batch's 202s before the batch's publish
	// returned, so a queue server killed meanwhile loses orders answered accepted.
	AcceptedUnstored Bug = "accepted-unstored"
	// BusyFirst: a checkout is answered its first refused line's answer in SKU order, so a busy
	// line (its last unit held) hides another line sold out, and its buyer retries for nothing.
	BusyFirst Bug = "busy-first"
	// PassForAnyBuyer: a pass is checked without its sub, so a buyer holding another buyer's
	// pass for the product is let in with it.
	PassForAnyBuyer Bug = "pass-for-any-buyer"
	// ExpiredPass: a pass is checked with a century of leeway, so one whose exp has passed still
	// lets its buyer in.
	ExpiredPass Bug = "expired-pass"
	// AdmissionPerInstance: each instance advances a waiting room's serving counter by the time
	// since its own last call, so buyers come in at the rate times the number of instances.
	AdmissionPerInstance Bug = "admission-per-instance"
	// EarlyArrivalOrder: those who join a waiting room before its start are placed in the order
	// they came, so arriving early is an advantage.
	EarlyArrivalOrder Bug = "early-arrival-order"
	// LimitPerInstance: a buyer's token bucket is kept per instance, so a buyer spread over n
	// instances gets n times its limit.
	LimitPerInstance Bug = "limit-per-instance"
	// FeedPerWatcher: the sale page's events start a feed for every watcher, so each one reads
	// the product's row every tick and a thousand watchers cost a thousand reads a tick.
	FeedPerWatcher Bug = "feed-per-watcher"
	// BrowserClock: the sale page counts down to the start on the browser's clock, so a browser
	// whose clock is ahead opens the button before the sale does.
	BrowserClock Bug = "browser-clock"
	// LooseFastDecode: the request body's fast decoder takes unknown fields, which encoding/json
	// refuses, so a misspelt field (qty for quantity) is dropped and the order placed anyway.
	LooseFastDecode Bug = "loose-fast-decode"
	// OrphanSessionFirst: the ZooKeeper lock's remover of an abandoned create reads the session
	// before the create returns, so a create queued while the client had no session, and sent on
	// the next, leaves its node to that session: the lock held by nobody for as long as it lives.
	OrphanSessionFirst Bug = "orphan-session-first"
)
