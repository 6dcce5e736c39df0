package backendtest

import (
	"fmt"
	"math"
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
// A history of one-unit orders alone is decided exactly in linear time (unitOrders); any other
// goes to porcupine's search, which can run past its 30 s bound on a history whose attempts all
// overlap — a sale through a failover, when every order waits seconds.
func Linearizable(units int, history []porcupine.Operation) porcupine.CheckResult {
	if verdict, ok := unitOrders(units, history); ok {
		return verdict
	}
	return porcupine.CheckOperationsTimeout(StockModel(units), history, 30*time.Second)
}

// unitOrders decides a history of one-unit orders (no cancels) against StockModel(units), and
// says whether it could. Stock only falls, one unit per ok, so an ordering exists iff no more
// than units orders succeeded, none heard sold_out while stock was surely left (fewer than units
// succeeded at all), and — when all units sold — some instant T lies after every ok's call and
// before every sold_out's return: the oks each at their call, in call order, the last at T; each
// sold_out just after T. Busy changes nothing and fits anywhere.
func unitOrders(units int, history []porcupine.Operation) (porcupine.CheckResult, bool) {
	var oks, soldOuts int
	lastOKCall, firstSoldOutReturn := int64(math.MinInt64), int64(math.MaxInt64)
	for _, op := range history {
		if q, ok := op.Input.(int); !ok || q != 1 {
			return "", false
		}
		switch op.Output {
		case "ok":
			oks++
			lastOKCall = max(lastOKCall, op.Call)
		case "sold_out":
			soldOuts++
			firstSoldOutReturn = min(firstSoldOutReturn, op.Return)
		case "busy":
		default:
			return porcupine.Illegal, true
		}
	}
	switch {
	case oks > units, oks < units && soldOuts > 0, oks == units && lastOKCall > firstSoldOutReturn:
		return porcupine.Illegal, true
	}
	return porcupine.Ok, true
}

// AssertLinearizable fails the test unless the history fits StockModel(units).
func AssertLinearizable(t testing.TB, units int, history []porcupine.Operation) {
	t.Helper()
	if !assert.Equal(t, porcupine.Ok, Linearizable(units, history),
		"the history of %d attempts is not linearizable against one product's stock", len(history)) {
		t.Log(describeUnitOrders(history))
	}
}

// describeUnitOrders says when a history's oks and sold_outs came, for a failed check: the
// sold_outs that returned before the last ok was called are the answers no ordering explains.
func describeUnitOrders(history []porcupine.Operation) string {
	lastOK := porcupine.Operation{Call: math.MinInt64}
	for _, op := range history {
		if op.Output == "ok" && op.Call > lastOK.Call {
			lastOK = op
		}
	}
	var early []string
	for _, op := range history {
		if op.Output == "sold_out" && op.Return < lastOK.Call {
			early = append(early, fmt.Sprintf("client %d [%s, %s]", op.ClientId, time.Duration(op.Call), time.Duration(op.Return)))
		}
	}
	return fmt.Sprintf("the last ok: client %d [%s, %s]; %d sold_out returned before it was called: %v",
		lastOK.ClientId, time.Duration(lastOK.Call), time.Duration(lastOK.Return), len(early), early)
}
