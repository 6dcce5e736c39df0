package planted_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/planted"
)

// TestChecksCatchPlantedBugs plants each bug the project's checks exist for, in a build with the
// plantedbugs tag, and runs the check that exists for it: the check must fail, and say so in
// its own words. A check that passes with its bug planted cannot fail, and proves nothing.
// A test runs in its package's test binary, built once, exactly as the suite runs it; a lab
// experiment in the lab's binary, as cmd/lab runs it.
//
// The checks that run service processes are in TestProcessChecksCatchPlantedBugs, which
// scripts/test.sh runs in its serial lane, with cmd/api: their promises are timed on a machine the
// rest of the suite does not load.
func TestChecksCatchPlantedBugs(t *testing.T) {
	catches(t, inProcessAtOnce, []row{
		{planted.BlindWrite, "internal/lockstrategy", "TestPausedHolderLosesItsLock/hybrid", nil, "the paused writer's version check failed"},
		{planted.BlindWrite, "cmd/lab", "", []string{"-small", "-out", "lab-report", "ttl"}, "the fix did not hold"},
		{planted.NoFence, "internal/lockstrategy", "TestPausedHolderLosesItsLock/etcd", nil, "the old holder's write was fenced out"},
		{planted.NoWatchdog, "internal/lockstrategy", "TestHybridWatchdogKeepsLock", nil, "the extended lock kept the other instance out"},
		{planted.LostGiveBack, "internal/lockstrategy", "TestHybridGiveBack", nil, "the repeat buyer's unit was given back"},
		{planted.EveryoneAlive, "internal/service", "TestStrandedUnits", nil, "a reservation whose instance stopped beating is never reported stranded"},
		{planted.NoFence, "internal/lockstrategy", "TestPausedHolderLosesItsLock/zookeeper", nil, "the old holder's write was fenced out"},
		{planted.DoubleReturn, "internal/stock", "TestExpiry", nil, "every unit back, once"},
		{planted.UncheckedWriter, "internal/queued", "TestQueuedCrashBeforePublish", nil, "the late message placed nothing"},
		{planted.UnrecordedAccepted, "internal/queued", "TestQueuedNoAcceptWithoutRecord", nil, "no record of the order: a 202 would promise what a sweeper may take back"},
		{planted.UnreadKey, "internal/queued", "TestQueuedKeyOfAnEndedOrder", nil, "the repeat answers the first order, not a second one"},
		{planted.KeyAcrossUsers, "internal/handler", "TestIdempotency", nil, "another request under the key was handed its order"},
		{planted.SettleWithoutTakeBack, "internal/admission", "TestSettleAfterSweep", nil, "the settle took the swept unit again"},
		{planted.HeldAtOnce, "internal/service", "TestNoNeedlessBusy", nil, "busy answers came before their wait budget ran out"},
		{planted.AnyRejectionGivenUp, "internal/queued", "TestQueuedRecordedFirst", nil, "its message went out: the order was accepted"},
		{planted.NoneGivenUp, "internal/queued", "TestQueuedRecordedFirst", nil, "given up before it was recorded queued: never accepted"},
		{planted.IgnoredWaitingBound, "internal/queued", "TestQueuedBoundsTheWaiting", nil, "a fourth order waiting behind three"},
		{planted.NowaitAsWait, "internal/lockstrategy", "TestPessimisticRowHeld/nowait,_released", nil, "NOWAIT: no session ever parked in the row's lock queue"},
		{planted.PartialCheckout, "internal/stock", "TestCheckoutStaleLineWritesNothing", nil, "a stale line wrote no line of its checkout"},
		{planted.RequestOrder, "internal/stock", "TestCheckoutTakesRowsInSKUOrder", nil, "crossed checkouts deadlocked"},
		{planted.RequestOrder, "internal/lockstrategy", "TestCrossedCheckoutsAcrossInstances/etcd", nil, "a lock wait ran out"},
		{planted.BeatsWithoutDatabase, "internal/service", "TestCutOffFromItsDatabase", nil, "the cut-off instance's reservation never came back"},
		{planted.AuditCountsWritten, "internal/queued", "TestQueuedAuditCountsOrdersOnce", nil, "written and not yet settled: one of the product's orders, not queued"},
		{planted.CheckoutFoundByLine, "internal/queued", "TestQueuedRedeliveredPlacedCheckout", nil, "the redelivered checkout stays placed"},
		{planted.RejectedUnitsHeld, "internal/queued", "TestQueuedRejectedUnitsReturn", nil, "reservations left"},
		{planted.AckedUndecided, "internal/queued", "TestQueuedWriterStoppedMidBatch", nil, "the batch was acked before its checkout was decided"},
		{planted.AcceptedUnstored, "internal/queued", "TestQueuedNoAcceptWithoutRecord", nil, "no 202 before its batch is stored"},
		{planted.EndedAsUnavailable, "internal/stock", "TestIdleTransactionReleasesRow", nil, "a transaction the database ended is busy, not unavailable"},
		{planted.SoldOutUnderLock, "internal/lockstrategy", "TestSoldOutTakesNoLock", nil, "the sold-out answer took no lock"},
		{planted.BusyFirst, "internal/admission", "TestCheckoutSoldOutBeforeBusy", nil, "not busy: the sold-out line refuses the checkout"},
		{planted.PassForAnyBuyer, "internal/frontdoor", "TestPassBoundToBuyer", nil, "another buyer's pass was refused"},
		{planted.ExpiredPass, "internal/frontdoor", "TestPassExpires", nil, "the expired pass was refused"},
		{planted.AdmissionPerInstance, "internal/frontdoor", "TestAdmissionRateAcrossInstances", nil, "admission must run at the deployment's rate"},
		{planted.EarlyArrivalOrder, "internal/frontdoor", "TestEarlyJoinersShuffled", nil, "arriving early gave an advantage"},
		{planted.LimitPerInstance, "internal/frontdoor", "TestBuyerLimitAcrossInstances", nil, "a buyer spread over three instances got more than its bucket"},
		{planted.FeedPerWatcher, "internal/handler", "TestEventsOneFeedForManyWatchers", nil, "the events read it for each watcher"},
		{planted.BrowserClock, "internal/handler", "TestSalePageInBrowser", nil, "the countdown ran on the browser's clock"},
		{planted.LooseFastDecode, "internal/handler", "FuzzDecodersAgree", nil, "which encoding/json refuses"},
		{planted.OrphanSessionFirst, "internal/lock/zklock", "TestZKMutexCreateAcrossSessions", nil, "the create sent on the new session left no node"},
	})
}

// TestProcessChecksCatchPlantedBugs is TestChecksCatchPlantedBugs for the checks that run service
// processes (cmd/api).
func TestProcessChecksCatchPlantedBugs(t *testing.T) {
	catches(t, 1, []row{
		{planted.NoSweep, "cmd/api", "TestProcessesHybridKill", nil, "units held back by dead reservations never came back"},
		{planted.LongHeartbeat, "cmd/api", "TestProcessesFrozenAtSaleEnd", nil, "reservations were still its own when it woke: no sweeper returned them"},
		{planted.LongHeartbeat, "cmd/api", "TestProcessesQueuedFrozen", nil, "the stopped process still held reservations when it woke"},
		{planted.LongAckWait, "cmd/api", "TestProcessesQueuedWriterKill", nil, "every 202 ends within 10 s of the kill"},
		{planted.NoDrain, "cmd/api", "TestProcessesShutdownUnderLoad", nil, "requests the process had taken lost their answers"},
	})
}

// A row is one planted bug and the check that must catch it.
type row struct {
	bug   planted.Bug
	pkg   string   // the check's package, from the module root
	check string   // the test that must fail; empty: pkg is a command, run with args
	args  []string // the command's arguments
	says  string   // what it says when it does
}

// inProcessAtOnce is how many in-process checks run at once. Most of a check's time is a wait
// (a lease or a session running out, a sweep's turn): run one after another they took 90 s on an
// idle machine with less than half a core busy.
const inProcessAtOnce = 3

// catches plants each row's bug and runs its check, which must fail in its own words; atOnce
// checks run at a time. Every binary is built first, one at a time.
func catches(t *testing.T, atOnce int, rows []row) {
	if testing.Short() {
		t.Skip("builds test binaries with the plantedbugs tag and runs checks against planted bugs; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	// binary builds pkg with the plantedbugs tag: its test binary, or the command itself.
	binary := func(pkg string, test bool) string {
		bin := filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_"))
		args := []string{"build", "-tags", "plantedbugs", "-o", bin}
		if test {
			bin += ".test"
			args = []string{"test", "-c", "-tags", "plantedbugs", "-o", bin}
		}
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
		cmd := exec.Command("go", append(args, "./"+pkg)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "build %s: %s", pkg, out)
		return bin
	}
	bins := make([]string, len(rows))
	for i, tc := range rows {
		bins[i] = binary(tc.pkg, tc.check != "")
	}
	turns := make(chan struct{}, atOnce)
	for i, tc := range rows {
		name := tc.check
		if name == "" {
			name = tc.pkg + " " + strings.Join(tc.args, " ")
		}
		t.Run(string(tc.bug)+"/"+name, func(t *testing.T) {
			t.Parallel()
			turns <- struct{}{}
			defer func() { <-turns }()
			var cmd *exec.Cmd
			if tc.check != "" {
				cmd = exec.Command(bins[i], "-test.run", "^"+tc.check+"$", "-test.count=1", "-test.v")
				cmd.Dir = filepath.Join(root, tc.pkg) // where go test runs it
			} else {
				cmd = exec.Command(bins[i], tc.args...)
				cmd.Dir = t.TempDir()
			}
			cmd.Env = append(os.Environ(), "SECKILL_PLANTED_BUG="+string(tc.bug))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s passed with %s planted: it cannot catch the bug it exists for\n%s", name, tc.bug, tail(out))
			if tc.check != "" {
				assert.Contains(t, string(out), "--- FAIL: "+tc.check, "%s did not fail as a test\n%s", name, tail(out))
			}
			assert.Contains(t, string(out), tc.says, "%s failed, but not on the check for %s\n%s", name, tc.bug, tail(out))
		})
	}
}

// tail is the end of a check's output, enough to see why it passed or failed.
func tail(out []byte) string {
	const n = 3000
	if len(out) > n {
		return "...\n" + string(out[len(out)-n:])
	}
	return string(out)
}
