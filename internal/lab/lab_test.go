package lab_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lab"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// TestExperimentsReproduce runs every experiment at its small size on the test backends: its
// failing form must fail and its fix must hold, or the lab has silently stopped showing what it
// claims to show.
func TestExperimentsReproduce(t *testing.T) {
	env := lab.NewEnv(lab.Small, backendtest.Store(t), backendtest.Redis(t), nil)
	for _, e := range lab.Experiments() {
		t.Run(e.Name, func(t *testing.T) {
			res, err := e.Run(context.Background(), env)
			var notRun *lab.NotRun
			if errors.As(err, &notRun) && !backendtest.Required() {
				t.Skipf("%s (SECKILL_TEST_REQUIRE_BACKENDS=1 makes this a failure)", notRun.Why)
			}
			require.NoError(t, err)
			t.Logf("failing, %s: %s", res.Failing.Form, res.Failing.Happened)
			t.Logf("fix, %s: %s", res.Fixed.Form, res.Fixed.Happened)
			assert.True(t, res.Failing.Failed, "the failure did not happen")
			assert.False(t, res.Fixed.Failed, "the fix did not hold")
			assert.NotEmpty(t, res.Chart.Bars, "no chart")
		})
	}
}

// TestVerdicts: a report is reproduced only when the failure happened and the fix held, and the
// last line names every experiment that was not.
func TestVerdicts(t *testing.T) {
	failed, held := lab.Outcome{Failed: true}, lab.Outcome{}
	reports := []lab.Report{
		{Name: "a", Result: lab.Result{Failing: failed, Fixed: held}, Reproduced: true},
		{Name: "b", Result: lab.Result{Failing: held, Fixed: held}},
		{Name: "c", Result: lab.Result{Failing: failed, Fixed: failed}},
		{Name: "d", NotRun: "no ZooKeeper"},
	}
	assert.True(t, reports[0].Result.Reproduced())
	assert.False(t, reports[1].Result.Reproduced())
	assert.False(t, reports[2].Result.Reproduced())
	assert.Equal(t, []string{"reproduced", "not reproduced: the failure did not happen", "not reproduced: the fix did not hold", "not run"},
		[]string{reports[0].Verdict(), reports[1].Verdict(), reports[2].Verdict(), reports[3].Verdict()})
	assert.Equal(t, "lab: 1/4 experiments reproduced; not: b, c, d", lab.Summary(reports))
	assert.Equal(t, "lab: 1/1 experiments reproduced", lab.Summary(reports[:1]))
}
