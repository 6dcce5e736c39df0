package backendtest

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log keeps the warnings and errors an instance logs, with their times: the instance's own
// clock for when something happened (a reservation returned, a section abandoned), where the
// test's polling would add its own lateness.
type Log struct {
	mu      sync.Mutex
	records []logged
}

type logged struct {
	at    time.Time
	msg   string
	attrs map[string]string
}

// At lists when the instance logged msg with every attribute of attrs (key, value, ...).
func (l *Log) At(msg string, attrs ...string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var at []time.Time
	for _, r := range l.records {
		if r.msg == msg && matches(r.attrs, attrs) {
			at = append(at, r.at)
		}
	}
	return at
}

func matches(have map[string]string, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if have[want[i]] != want[i+1] {
			return false
		}
	}
	return true
}

// handler is the slog.Handler that fills l, with the attributes given to its logger.
func (l *Log) handler() slog.Handler { return logHandler{log: l} }

type logHandler struct {
	log   *Log
	attrs []slog.Attr
}

func (logHandler) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }

func (h logHandler) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	h.log.mu.Lock()
	h.log.records = append(h.log.records, logged{at: r.Time, msg: r.Message, attrs: attrs})
	h.log.mu.Unlock()
	return nil
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{log: h.log, attrs: append(append([]slog.Attr{}, h.attrs...), attrs...)}
}

func (h logHandler) WithGroup(string) slog.Handler { return h }
