package backendtest

import (
	"math/rand/v2"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnitOrdersAgreesWithPorcupine: on thousands of small random histories of one-unit orders —
// legal and not — the linear-time decision says what porcupine's search says.
func TestUnitOrdersAgreesWithPorcupine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	outputs := []string{"ok", "ok", "sold_out", "busy"}
	verdicts := map[porcupine.CheckResult]int{}
	for range 5000 {
		units := r.IntN(4)
		history := make([]porcupine.Operation, 1+r.IntN(7))
		for i := range history {
			call := r.Int64N(20)
			history[i] = porcupine.Operation{ClientId: i, Input: 1, Call: call, Return: call + 1 + r.Int64N(10),
				Output: outputs[r.IntN(len(outputs))]}
		}
		fast, ok := unitOrders(units, history)
		require.True(t, ok)
		want := porcupine.CheckOperations(StockModel(units), history)
		require.Equal(t, want == true, fast == porcupine.Ok, "units %d, history %+v", units, history)
		verdicts[fast]++
	}
	assert.Positive(t, verdicts[porcupine.Ok], "some histories were legal")
	assert.Positive(t, verdicts[porcupine.Illegal], "some were not")
}
