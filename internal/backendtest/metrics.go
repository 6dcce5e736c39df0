package backendtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// samples gathers the metrics of the family name whose labels include labels.
func samples(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue metrics
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// Counter sums the samples of a counter family whose labels include labels, over the instances.
func Counter(t testing.TB, name string, labels map[string]string, insts ...Instance) float64 {
	t.Helper()
	var sum float64
	for _, inst := range insts {
		for _, m := range samples(t, inst.Metrics, name, labels) {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Histogram reads the sample count and sum of a histogram family, over the instances.
func Histogram(t testing.TB, name string, insts ...Instance) (count uint64, sum float64) {
	t.Helper()
	for _, inst := range insts {
		for _, m := range samples(t, inst.Metrics, name, nil) {
			count += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return count, sum
}

// Gauges sums the samples of a gauge family whose labels include labels, over the instances: 0
// where there is none yet.
func Gauges(t testing.TB, name string, labels map[string]string, insts ...Instance) float64 {
	t.Helper()
	var sum float64
	for _, inst := range insts {
		for _, m := range samples(t, inst.Metrics, name, labels) {
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// Gauge reads a gauge without labels of one instance.
func Gauge(t testing.TB, inst Instance, name string) float64 {
	t.Helper()
	m := samples(t, inst.Metrics, name, nil)
	require.Len(t, m, 1, "gauge %s", name)
	return m[0].GetGauge().GetValue()
}
