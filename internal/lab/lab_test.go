package lab_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lab"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// TestExperimentsReproduce runs every experiment at its small size on the test backends: its
// failing form must fail and its fix must hold, or the lab has silently stopped showing what it
// claims to show. A measurement (throughput) must take every figure and judge its claims; which
// claims the figures bear out is what it finds, not what the test asserts. A part that could
// not run here (ZooKeeper missing) fails under SECKILL_TEST_REQUIRE_BACKENDS=1 and skips,
// saying so, otherwise.
func TestExperimentsReproduce(t *testing.T) {
	env := lab.Open(context.Background(), lab.Options{Config: backendtest.AppConfig(t), Size: lab.Small})
	t.Cleanup(func() { _ = env.Close() })
	for _, e := range lab.Experiments() {
		t.Run(e.Name, func(t *testing.T) {
			res, err := e.Run(context.Background(), env)
			var notRun *lab.NotRun
			if errors.As(err, &notRun) && !backendtest.Required() {
				t.Skipf("%s (SECKILL_TEST_REQUIRE_BACKENDS=1 makes this a failure)", notRun.Why)
			}
			require.NoError(t, err)
			if e.Measures {
				require.NotNil(t, res.Measured, "a measurement without figures")
				t.Logf("measured, %s: %s", res.Measured.Method, res.Measured.Figures)
				for _, j := range res.Measured.Claims {
					t.Logf("%s: %s; %s, %s", j.Verdict(), j.Claim, j.Subject, j.Measured)
				}
				assert.True(t, res.Measured.Complete, "a figure is missing")
				assert.NotEmpty(t, res.Measured.Claims, "no claim judged")
			} else {
				t.Logf("failing, %s: %s", res.Failing.Form, res.Failing.Happened)
				t.Logf("fix, %s: %s", res.Fixed.Form, res.Fixed.Happened)
				assert.True(t, res.Failing.Failed, "the failure did not happen")
				assert.False(t, res.Fixed.Failed, "the fix did not hold")
			}
			assert.NotEmpty(t, res.Chart.Bars, "no chart")
			for _, p := range res.NotRun {
				if backendtest.Required() {
					t.Errorf("its %s part did not run: %s (SECKILL_TEST_REQUIRE_BACKENDS=1)", p.Name, p.Why)
				} else {
					t.Skipf("its %s part did not run: %s (SECKILL_TEST_REQUIRE_BACKENDS=1 makes this a failure)", p.Name, p.Why)
				}
			}
		})
	}
}

// TestVerdicts: a report is reproduced only when the failure happened and the fix held; a
// measurement counts its claims apart from the experiments; a part that did not run is named.
// The last line and Check name every report that did not pass.
func TestVerdicts(t *testing.T) {
	failed, held := lab.Outcome{Failed: true}, lab.Outcome{}
	claims := []lab.Judgement{{Claim: "x", Held: true}, {Claim: "y"}}
	reports := []lab.Report{
		{Name: "a", Result: lab.Result{Failing: failed, Fixed: held}, Reproduced: true},
		{Name: "b", Result: lab.Result{Failing: held, Fixed: held}},
		{Name: "c", Result: lab.Result{Failing: failed, Fixed: failed}},
		{Name: "d", NotRun: "no MariaDB"},
		{Name: "e", Measures: true, Result: lab.Result{Measured: &lab.Measurement{Complete: true, Claims: claims}}},
		{Name: "f", Result: lab.Result{Failing: failed, Fixed: held, NotRun: []lab.Part{{Name: "ZooKeeper", Why: "not installed"}}}, Reproduced: true},
		{Name: "g", Measures: true, Result: lab.Result{Measured: &lab.Measurement{Claims: claims}}},
	}
	assert.True(t, reports[0].Result.Reproduced())
	assert.False(t, reports[1].Result.Reproduced())
	assert.False(t, reports[2].Result.Reproduced())
	assert.False(t, reports[4].Result.Reproduced(), "a measurement reproduces nothing")
	var verdicts []string
	for _, r := range reports {
		verdicts = append(verdicts, r.Verdict())
	}
	assert.Equal(t, []string{"reproduced", "not reproduced: the failure did not happen", "not reproduced: the fix did not hold", "not run",
		"measured: 1 of 2 claims held here", "reproduced; its ZooKeeper part not run (not installed)", "not measured: a figure is missing"}, verdicts)
	assert.Equal(t, "lab: 2/5 experiments reproduced; not: b, c, d; e: 1 of 2 claims held here; g: not measured: a figure is missing; parts not run: f (ZooKeeper)",
		lab.Summary(reports))
	assert.Equal(t, "lab: 1/1 experiments reproduced", lab.Summary(reports[:1]))
	assert.Equal(t, "lab: 1/1 experiments reproduced; e: 1 of 2 claims held here", lab.Summary([]lab.Report{reports[0], reports[4]}))

	assert.NoError(t, lab.Check([]lab.Report{reports[0], reports[4]}), "a contradicted claim is a finding, not a failure")
	err := lab.Check(reports)
	require.Error(t, err)
	for _, named := range []string{"b: not reproduced: the failure did not happen", "c: not reproduced: the fix did not hold", "d not run: no MariaDB",
		"f: reproduced; its ZooKeeper part not run (not installed)", "g: not measured"} {
		assert.ErrorContains(t, err, named)
	}
	assert.NotContains(t, err.Error(), "a:")
	assert.NotContains(t, err.Error(), "e:")

	md := lab.Markdown(reports)
	assert.Contains(t, md, "| x |  |  | held |")
	assert.Contains(t, md, "| y |  |  | contradicted |")
	assert.NotContains(t, md, "| `e` |", "a measurement has no failing form and no fix")
}

// TestConsole: one short line per experiment — the claim to its first clause, what the chart
// measures, the failing form's figure and the fix's — however long the report's own cells run.
func TestConsole(t *testing.T) {
	long := strings.Repeat("a holder that waits ", 20)
	chart := lab.Chart{Title: "Units oversold", Unit: "units", Bars: []lab.Bar{
		{Label: "the lock alone", Value: 50, Failed: true}, {Label: "watchdog", Value: 0}, {Label: "version check", Value: 0.25}}}
	reports := []lab.Report{
		{Name: "ttl", Claim: "A short TTL (a 5 s one; or less) lets two holders in; the watchdog stops it.", Reproduced: true,
			Result: lab.Result{Failing: lab.Outcome{Happened: long, Failed: true}, Fixed: lab.Outcome{Happened: long}, Chart: chart}},
		{Name: "pool", Claim: long, NotRun: "no MariaDB"},
	}
	lines := strings.Split(strings.TrimSpace(lab.Console(reports)), "\n")
	require.Len(t, lines, 4, "a header, its rule and one line per experiment")
	assert.Equal(t, "| `ttl` | A short TTL (a 5 s one; or less) lets two holders in | Units oversold | 50 units | 0.25 units | reproduced |", lines[2])
	assert.Equal(t, "| `pool` | a holder that waits a holder that waits a holder that waits a holder that waits … |  |  |  | not run |", lines[3])
	for _, l := range lines {
		assert.LessOrEqual(t, len([]rune(l)), 250, l)
	}
}
