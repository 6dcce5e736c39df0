package buyer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/buyer"
	"github.com/flashsale/seckill/internal/stock"
)

// answers is a place that answers each attempt with the next error of errs, then an order.
func answers(errs ...error) (buyer.Place, *int) {
	var n int
	return func(context.Context, stock.OrderRequest) (stock.Order, bool, error) {
		n++
		if n <= len(errs) {
			return stock.Order{}, false, errs[n-1]
		}
		return stock.Order{OrderID: "o-1"}, false, nil
	}, &n
}

func TestBuy(t *testing.T) {
	req := stock.OrderRequest{SKU: "sku", UserID: "u-1", Quantity: 1}
	for _, tc := range []struct {
		name        string
		errs        []error
		unavailable bool
		code        string
		attempts    int
		internal    bool
	}{
		{"busy is asked again", []error{stock.ErrBusy, stock.ErrBusy}, false, "ok", 3, false},
		{"sold out is an answer", []error{stock.ErrSoldOut}, false, "sold_out", 1, false},
		{"unavailable is an answer by default", []error{stock.ErrUnavailable}, false, "unavailable", 1, false},
		{"unavailable asked again when told", []error{stock.ErrUnavailable, stock.ErrBusy}, true, "ok", 3, false},
		{"internal is never an answer", []error{stock.ErrBusy, errors.New("boom")}, false, "internal", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			place, n := answers(tc.errs...)
			out, err := buyer.Buyer{ID: 7, Places: []buyer.Place{place}, Unavailable: tc.unavailable}.Buy(context.Background(), req)
			assert.Equal(t, tc.internal, err != nil, "error: %v", err)
			assert.Equal(t, tc.code, out.Code())
			assert.Equal(t, tc.attempts, *n)
			assert.Equal(t, tc.attempts-1, out.Retries())
			assert.Equal(t, 7, out.Op.ClientId)
			assert.Equal(t, tc.code, out.Op.Output)
			assert.Equal(t, 1, out.Op.Input)
			assert.LessOrEqual(t, out.Op.Call, out.Op.Return)
		})
	}
}

// TestBuyUntil: past Until, a busy answer is the outcome.
func TestBuyUntil(t *testing.T) {
	busy := func(context.Context, stock.OrderRequest) (stock.Order, bool, error) {
		return stock.Order{}, false, stock.ErrBusy
	}
	out, err := buyer.Buyer{Places: []buyer.Place{busy}, Until: time.Now().Add(50 * time.Millisecond)}.Buy(context.Background(), stock.OrderRequest{Quantity: 1})
	require.NoError(t, err)
	assert.Equal(t, "busy", out.Code())
	assert.Positive(t, out.Retries())
}

// TestBuyPlacesInTurn: the attempts go to the places in turn, as behind a load balancer.
func TestBuyPlacesInTurn(t *testing.T) {
	var calls []int
	place := func(i int) buyer.Place {
		return func(context.Context, stock.OrderRequest) (stock.Order, bool, error) {
			calls = append(calls, i)
			if len(calls) < 4 {
				return stock.Order{}, false, stock.ErrBusy
			}
			return stock.Order{}, false, nil
		}
	}
	_, err := buyer.Buyer{Places: []buyer.Place{place(0), place(1), place(2)}}.Buy(context.Background(), stock.OrderRequest{Quantity: 1})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 2, 0}, calls)
}
