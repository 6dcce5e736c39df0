package lab_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/lab"
)

// TestQueueCrashReproduces runs queue-crash at its small size and reads its figures: the
// pre-deduct-then-enqueue form must strand units (a check that fails if its crash stopped
// happening), and the queued strategy must strand none, place no order twice and bring the
// crashed instance's units back within the bound (a check that fails if the sweeper or the
// message id stopped doing their part).
func TestQueueCrashReproduces(t *testing.T) {
	env := lab.Open(context.Background(), lab.Options{Config: backendtest.AppConfig(t), Size: lab.Small})
	t.Cleanup(func() { _ = env.Close() })
	exps, err := lab.Find([]string{"queue-crash"})
	require.NoError(t, err)
	require.Len(t, exps, 1)
	res, err := exps[0].Run(context.Background(), env)
	require.NoError(t, err)
	t.Logf("failing, %s: %s", res.Failing.Form, res.Failing.Happened)
	t.Logf("fix, %s: %s", res.Fixed.Form, res.Fixed.Happened)
	assert.True(t, res.Failing.Failed, "the crash before the send stranded nothing")
	assert.False(t, res.Fixed.Failed, "the queued strategy did not hold")
	bars := map[string]lab.Bar{}
	for _, b := range res.Chart.Bars {
		bars[b.Label] = b
	}
	require.Len(t, bars, 4)
	assert.Positive(t, bars["pre-deduct, then enqueue: units stranded"].Value)
	assert.Zero(t, bars["queued: units stranded"].Value)
	assert.Zero(t, bars["queued: orders placed twice"].Value)
	back := bars["queued: s until the units were back on sale"]
	assert.False(t, back.Failed, "units back after %.2f s", back.Value)
	assert.Positive(t, back.Value)
	assert.Contains(t, res.Fixed.Happened, "their orders placed 0 times", "a late message of the crashed instance was written")
}
