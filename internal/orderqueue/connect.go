package orderqueue

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connect dials cfg.URLs, or the data dir's embedded server (embed): in-process when this
// instance runs it.
func (q *Queue) connect() error {
	opts := []nats.Option{
		nats.Name(q.cfg.Name),
		// Reconnect for ever, quickly: a restarted server or a lost node must not end the
		// instance's writers, and publishes in between fail fast (ErrUnavailable) instead of
		// queueing in the client.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.Timeout(2 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				q.log.Warn("order queue: disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			q.log.Info("order queue: reconnected", "server", nc.ConnectedUrl())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			q.log.Warn("order queue: asynchronous error", "err", err)
		}),
	}
	url := strings.Join(q.cfg.URLs, ",")
	if len(q.cfg.URLs) == 0 {
		var err error
		if url, err = q.embed(); err != nil {
			return err
		}
		if q.embedded != nil {
			opts = append(opts, nats.InProcessServer(q.embedded))
		}
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		q.Close()
		return fmt.Errorf("connect to NATS %s: %w: %w", url, ErrUnavailable, err)
	}
	q.nc = nc
	if q.js, err = jetstream.New(nc); err != nil {
		q.Close()
		return err
	}
	return nil
}
