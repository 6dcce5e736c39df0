package attack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/contract"
)

// queueServer is a service that answers every order 202 and ends each one as end says, after
// from the order's first poll — placed, rejected, or (for "") never: a planted 202 that the
// tool must see never end. Timed from the first poll, which the tool sends only once it has the
// 202, no order ends sooner than after from the 202 as the tool saw it. It holds
// each ?wait= poll up to a second, as the service does, so that the follower's long polls are
// the ones it sends to the real one.
func queueServer(t *testing.T, after time.Duration, end func(user string) string) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	accepted := map[string]time.Time{}
	users := map[string]string{}
	final := func(id string) contract.Order {
		mu.Lock()
		defer mu.Unlock()
		o := contract.Order{OrderID: id, UserID: users[id], Status: contract.StatusQueued}
		if s := end(users[id]); s != "" && time.Since(accepted[id]) >= after {
			o.Status = s
			if s == contract.StatusRejected {
				o.Reason = SoldOut
			}
		}
		return o
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			var body struct {
				UserID string `json:"user_id"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			id := "o-" + body.UserID
			mu.Lock()
			users[id] = body.UserID
			mu.Unlock()
			w.Header().Set("Location", "/api/v1/orders/"+id)
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(contract.Order{OrderID: id, UserID: body.UserID, Status: contract.StatusQueued})
			return
		}
		id := strings.TrimPrefix(r.URL.Path, "/api/v1/orders/")
		mu.Lock()
		if accepted[id].IsZero() {
			accepted[id] = time.Now()
		}
		mu.Unlock()
		wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		deadline := time.Now().Add(min(wait, time.Second))
		o := final(id)
		for o.Status == contract.StatusQueued && time.Now().Before(deadline) && r.Context().Err() == nil {
			time.Sleep(10 * time.Millisecond)
			o = final(id)
		}
		_ = json.NewEncoder(w).Encode(o)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFollowQueued: every 202 is followed from its answer until its order leaves queued, placed
// or rejected; the placed ones become orders the verifier holds the store against, the rejected
// ones do not; and one that stays queued past EndWithin is counted as never ended — the run's
// failure — instead of holding the tool forever.
func TestFollowQueued(t *testing.T) {
	srv := queueServer(t, 200*time.Millisecond, func(user string) string {
		switch {
		case strings.HasSuffix(user, "u000007"):
			return "" // the planted 202 that never ends
		case strings.HasSuffix(user, "u000003"):
			return contract.StatusRejected
		}
		return "confirmed"
	})
	l := Load{Targets: []string{srv.URL}, SKU: "q", Users: 10, Requests: 10, Concurrency: 4, Duration: 10 * time.Second,
		Timeout: 2 * time.Second, EndWithin: time.Second}
	start := time.Now()
	s, err := l.Run(context.Background(), "queued")
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "the never-ending 202 is given up EndWithin after the sale")
	require.Len(t, s.Queued, 10, "every 202 followed")
	assert.Len(t, s.Acked, 8, "the placed ones, and only they, are orders to verify")

	f := NewQueue(s.Results, s.Queued)
	require.NotNil(t, f)
	assert.Equal(t, Queue{Accepted: 10, Placed: 8, Rejected: 1, Unended: 1},
		Queue{Accepted: f.Accepted, Placed: f.Placed, Rejected: f.Rejected, Unended: f.Unended})
	assert.GreaterOrEqual(t, f.EndP50, 200*time.Millisecond, "no order ends before the server placed it")
	assert.Less(t, f.EndP99, time.Second, "a long poll answers when the order leaves queued, not when its wait ends")
	assert.Positive(t, f.AcceptedPerSecond)
	assert.Positive(t, f.PlacedPerSecond)
	assert.Less(t, f.PlacedPerSecond, f.AcceptedPerSecond, "placed lags accepted by the writers' time")
	assert.Nil(t, NewQueue(s.Results, nil), "a sale without a 202 has no queue figures")
}
