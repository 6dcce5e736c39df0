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
	// BeatsWithoutDatabase: an instance beats whether or not its database serves, so one cut
	// off from its database (its cluster node died) keeps its reservations' units off sale.
	BeatsWithoutDatabase Bug = "beats-without-database"
)
