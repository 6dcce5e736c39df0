package lab

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestThroughputClaims: a claim is held by a rate inside its range and contradicted by one
// outside it, on either side; each claim is judged on its own, so one figure can bear out one
// claim and contradict another.
func TestThroughputClaims(t *testing.T) {
	under1000 := throughputClaim{"under 1000", []string{"row"}, 0, 1_000}
	thousands := throughputClaim{"千级", []string{"row"}, 1_000, 10_000}
	atLeast := throughputClaim{"10万+", []string{"redis"}, 100_000, 0}
	for _, c := range []struct {
		name  string
		claim throughputClaim
		rate  float64
		held  bool
	}{
		{"inside an open range", atLeast, 150_000, true},
		{"below an open range", atLeast, 99_999, false},
		{"at the low end", thousands, 1_000, true},
		{"inside", thousands, 5_000, true},
		{"at the high end, which is out", thousands, 10_000, false},
		{"below", thousands, 999, false},
		{"above", thousands, 12_000, false},
		{"under an upper end", under1000, 950, true},
		{"over an upper end", under1000, 1_500, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.held, c.claim.holds(c.rate))
		})
	}

	best := []familyBest{
		{slug: "redis", name: "one Redis", cell: throughputCell{clients: 8, rate: 9_000}},
		{slug: "row", name: "FOR UPDATE", cell: throughputCell{clients: 8, rate: 1_500}},
		{slug: "etcd", name: "etcd", cell: throughputCell{clients: 8, rate: 700}},
	}
	got := map[string]bool{}
	for _, j := range judgeClaims([]throughputClaim{under1000, thousands, atLeast}, best) {
		got[j.Claim] = j.Held
	}
	assert.Equal(t, map[string]bool{"under 1000": false, "千级": true, "10万+": false,
		"«Choosing a lock» and «Locks in practice»: Redis first": true, "«Choosing a lock» and «Locks in practice»: the database last": false}, got)
}
