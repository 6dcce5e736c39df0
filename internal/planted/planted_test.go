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
// Each check runs in its package's test binary, built once, exactly as the suite runs it.
func TestChecksCatchPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds test binaries with the plantedbugs tag and runs checks against planted bugs; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	built := map[string]string{}
	// testBinary builds pkg's test binary with the plantedbugs tag, once.
	testBinary := func(t *testing.T, pkg string) string {
		t.Helper()
		if bin, ok := built[pkg]; ok {
			return bin
		}
		bin := filepath.Join(dir, strings.ReplaceAll(pkg, "/", "_")+".test")
		cmd := exec.Command("go", "test", "-c", "-tags", "plantedbugs", "-o", bin, "./"+pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "build %s: %s", pkg, out)
		built[pkg] = bin
		return bin
	}
	for _, tc := range []struct {
		bug   planted.Bug
		pkg   string // the check's package, from the module root
		check string // the test that must fail
		says  string // what it says when it does
	}{
		{planted.BlindWrite, "internal/lockstrategy", "TestHybridLockExpiry", "the paused writer's version check failed"},
		{planted.NoFence, "internal/lockstrategy", "TestEtcdLeaseRevokedMidHold", "the old holder's write was fenced out"},
		{planted.NoWatchdog, "internal/lockstrategy", "TestHybridWatchdogKeepsLock", "the extended lock kept the other instance out"},
		{planted.LostGiveBack, "internal/lockstrategy", "TestHybridGiveBack", "the repeat buyer's unit was given back"},
		{planted.NoSweep, "cmd/api", "TestProcessesHybridKill", "units held back by dead reservations never came back"},
		{planted.EveryoneAlive, "internal/service", "TestStrandedUnits", "a reservation whose instance stopped beating is never reported stranded"},
	} {
		t.Run(string(tc.bug), func(t *testing.T) {
			bin := testBinary(t, tc.pkg)
			cmd := exec.Command(bin, "-test.run", "^"+tc.check+"$", "-test.count=1", "-test.v")
			cmd.Dir = filepath.Join(root, tc.pkg) // where go test runs it
			cmd.Env = append(os.Environ(), "SECKILL_PLANTED_BUG="+string(tc.bug))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s passed with %s planted: it cannot catch the bug it exists for\n%s", tc.check, tc.bug, tail(out))
			assert.Contains(t, string(out), "--- FAIL: "+tc.check, "%s did not fail as a test\n%s", tc.check, tail(out))
			assert.Contains(t, string(out), tc.says, "%s failed, but not on the check for %s\n%s", tc.check, tc.bug, tail(out))
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
