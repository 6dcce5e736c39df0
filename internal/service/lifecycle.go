package service

import (
	"context"
	"errors"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// lifecycleEvery is how often an instance expires orders past their payment deadline and relays
// returned units to Redis admission: it bounds how long an unpaid order's units stay off sale.
const lifecycleEvery = time.Second

// Pay confirms the buyer's pending order or checkout (stock.Store.Pay). One past its deadline is
// expired on the way, its units back on sale, and refused with stock.ErrOrderExpired.
func (s *Service) Pay(ctx context.Context, ref stock.Ref, userID string) (stock.Checkout, error) {
	co, err := s.store.Pay(ctx, ref, userID)
	s.transitioned(ctx, "pay", err)
	return co, err
}

// Cancel cancels the buyer's order or checkout, or anyone's when userID is empty (the admin):
// stock.Store.Cancel. Its units are back on sale on every instance before this returns.
func (s *Service) Cancel(ctx context.Context, ref stock.Ref, userID string) (stock.Checkout, error) {
	co, err := s.store.Cancel(ctx, ref, userID)
	s.transitioned(ctx, "cancel", err)
	return co, err
}

// transitioned follows a pay or a cancel that ended with err: units it gave back are relayed to
// Redis admission at once, and the answer is counted.
func (s *Service) transitioned(ctx context.Context, transition string, err error) {
	if errors.Is(err, stock.ErrOrderExpired) || (err == nil && transition == "cancel") {
		s.relay(ctx)
	}
	s.transitions.WithLabelValues(transition, stock.Code(err)).Inc()
	s.countBusy(ctx, "", err)
}

// expire expires the orders past their deadline and relays ended orders' units to Redis
// admission. Every instance runs it; each expiry and each return happens once.
func (s *Service) expire(ctx context.Context) {
	expired, err := s.store.ExpireDue(ctx, 200)
	if err != nil && ctx.Err() == nil {
		s.log.Debug("orders not expired; next time", "err", err)
	}
	s.transitions.WithLabelValues("expire", "ok").Add(float64(len(expired)))
	s.relay(ctx)
}

// relay gives Redis admission the units of orders the database ended (restock_pending), marks
// them, and drops the products' sold-out flags everywhere. A failure waits for the next relay;
// each order's units return once (admission.Ledger.Restock).
func (s *Service) relay(ctx context.Context) {
	ended, err := s.store.Restocks(ctx, 500)
	if err != nil || len(ended) == 0 {
		return
	}
	bySKU := map[string][]stock.Order{}
	for _, o := range ended {
		bySKU[o.SKU] = append(bySKU[o.SKU], o)
	}
	for sku, orders := range bySKU {
		units, err := s.admission.Restock(ctx, sku, orders)
		if err != nil {
			s.log.Debug("returned units not relayed to Redis; next time", "sku", sku, "err", err)
			continue
		}
		s.restocked.Add(float64(units))
		ids := make([]string, len(orders))
		for i, o := range orders {
			ids[i] = o.OrderID
		}
		if err := s.store.Restocked(ctx, ids); err != nil {
			s.log.Debug("relayed units not marked; the next relay repeats them, harmlessly", "sku", sku, "err", err)
		}
		if s.soldOut != nil {
			s.soldOut.Reset(ctx, sku)
		}
	}
}
