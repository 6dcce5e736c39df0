package backendtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

// Cancel is the input of a cancellation, in a history: the order of Qty units that it ends.
type Cancel struct{ Qty int }

// StockModel is the sequential specification of one product, for porcupine: an order (input:
// its quantity) succeeds ("ok") only if enough stock is left and takes it; "sold_out" is
// answered only when not enough is left; "busy" changes nothing; a cancellation (input: Cancel)
// that succeeds gives its units back. Every attempt of a history must fit one sequential order of
// these steps, each somewhere between its call and its return — or the strategy let two orders
// see the same stock, or a unit came back twice.
func StockModel(initial int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return initial },
		Step: func(state, input, output any) (bool, any) {
			left := state.(int)
			if c, ok := input.(Cancel); ok {
				if output == "ok" {
					return true, left + c.Qty
				}
				return output == "busy", left
			}
			qty := input.(int)
			switch output {
			case "ok":
				return left >= qty, left - qty
			case "sold_out":
				return left < qty, left
			case "busy":
				return true, left
			}
			return false, left
		},
		DescribeOperation: func(input, output any) string {
			if c, ok := input.(Cancel); ok {
				return fmt.Sprintf("cancel(%d) -> %v", c.Qty, output)
			}
			return fmt.Sprintf("order(%v) -> %v", input, output)
		},
	}
}

// Linearizable checks a sale's history against StockModel(units) and reports the verdict.
func Linearizable(units int, history []porcupine.Operation) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(StockModel(units), history, 30*time.Second)
}

// AssertLinearizable fails the test unless the history fits StockModel(units).
func AssertLinearizable(t testing.TB, units int, history []porcupine.Operation) {
	t.Helper()
	assert.Equal(t, porcupine.Ok, Linearizable(units, history),
		"the history of %d attempts is not linearizable against one product's stock", len(history))
}
