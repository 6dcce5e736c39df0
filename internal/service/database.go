package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// database is whether this instance's own database serves, as its last heartbeat found. Cut off
// from it while others are not (its Galera node left), an instance must not keep units of the
// sale: its reservations would wait for writes it cannot make.
type database struct {
	store     *stock.Store
	admission *admission.Ledger
	wait      time.Duration // how long a heartbeat waits for the database's answer
	refused   atomic.Bool   // the database's last answer was a refusal
	log       *slog.Logger
}

// beat writes this instance's heartbeat (admission.Ledger.Beat) only while its database serves:
// cut off, it stops showing itself alive, and the others sweep its reservations within the
// instance TTL. An order it still writes is guarded as any other; its settle takes the units back.
func (d *database) beat(ctx context.Context) {
	readyCtx, cancel := context.WithTimeout(ctx, d.wait)
	err := d.store.Ready(readyCtx)
	cancel()
	if planted.On(planted.BeatsWithoutDatabase) {
		err = nil
	}
	switch {
	case err == nil:
		if d.refused.Swap(false) {
			d.log.Info("the database serves again: heartbeats and orders resume")
		}
		freezepoint.At(freezepoint.Beat)
		d.admission.Beat(ctx)
	case errors.Is(err, stock.ErrUnavailable):
		if !d.refused.Swap(true) {
			d.log.Warn("the database refuses: no heartbeat, orders answered unavailable, the other instances return this one's reservations", "err", err)
		}
	default:
		// No answer in time: no heartbeat either, but orders still try — a slow database is not
		// a refusal.
		d.log.Debug("the database did not answer in time: no heartbeat this time", "err", err)
	}
}

// ready is the database's readiness check: not ready while orders are refused, then the
// database's own answer.
func (d *database) ready(ctx context.Context) error {
	if err := d.refuses(); err != nil {
		return err
	}
	return d.store.Ready(ctx)
}

// refuses answers unavailable while the database's last answer was a refusal, before admission
// reserves a unit for an order this instance cannot write.
func (d *database) refuses() error {
	if d.refused.Load() {
		return fmt.Errorf("this instance's database refuses to serve: %w", stock.ErrUnavailable)
	}
	return nil
}
