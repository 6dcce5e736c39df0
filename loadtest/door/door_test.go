package door

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummarize: the admission rate is read from the positions the buyers heard, and how far
// admission strays from join order is counted in places.
func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var visits []Visit
	for i := range 100 {
		// Buyer i joins at i ms, hears it has i places ahead, and is let in at 1 s + 10 ms a
		// place: 100 a second, as its positions falling say.
		joined, admitted := t0.Add(time.Duration(i)*time.Millisecond), t0.Add(time.Second+time.Duration(i)*10*time.Millisecond)
		v := Visit{Joined: joined, Admitted: admitted, Ordered: t0.Add(2 * time.Second)}
		v.heard(map[string]any{"position": float64(i)}, joined)
		v.heard(map[string]any{"position": float64(0)}, joined.Add(time.Duration(i)*10*time.Millisecond))
		visits = append(visits, v)
	}
	visits[3].Admitted, visits[4].Admitted = visits[4].Admitted, visits[3].Admitted // one pair swapped
	visits = append(visits, Visit{Ended: "sold_out"})
	r := Summarize(visits)
	assert.Equal(t, 100, r.Admitted)
	assert.Equal(t, 1, r.SoldOutInLine)
	assert.InDelta(t, 100, r.Rate, 0.5)
	assert.Equal(t, 0, r.StrayP50)
	assert.Equal(t, 1, r.StrayMax, "the swapped pair is one place off")
	assert.Equal(t, time.Second+49*9*time.Millisecond, r.JoinToPass[0], "join to pass of the median buyer (the 50th: 1 s + 9 ms a place)")
}

// TestRateInWindow: a window counts only the positions heard in it — a line that moved 100 a
// second and then 50 reads as each in its own half.
func TestRateInWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	v := Visit{}
	for s := range 10 {
		step := int64(100)
		if s >= 5 {
			step = 50
		}
		pos := int64(2000)
		if len(v.Positions) > 0 {
			pos = v.Positions[len(v.Positions)-1].Position - step
		}
		v.Positions = append(v.Positions, Heard{At: t0.Add(time.Duration(s) * time.Second), Position: pos})
	}
	visits := []Visit{v}
	assert.InDelta(t, 100, Rate(visits, t0, t0.Add(4*time.Second)), 0.01)
	assert.InDelta(t, 50, Rate(visits, t0.Add(5*time.Second), time.Time{}), 0.01)
	assert.False(t, v.Rose())
	v.Positions = append(v.Positions, Heard{At: t0.Add(time.Minute), Position: 1999})
	assert.True(t, v.Rose(), "a position higher than one heard before")
}

// TestClientMovesOn: a request whose target cannot be reached goes to the next one, with the same
// Idempotency-Key; one every target refuses is an error.
func TestClientMovesOn(t *testing.T) {
	var key string
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key = r.Header.Get("Idempotency-Key")
		w.WriteHeader(http.StatusCreated)
	}))
	defer live.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	c := NewClient(live.Client(), []string{dead, live.URL}, 1)
	a, err := c.Do(context.Background(), 0, Request{Method: http.MethodPost, Path: "/x", Key: "k-1", Body: "{}"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, a.Status)
	assert.Equal(t, live.URL, a.Target)
	assert.Equal(t, "k-1", key)

	_, err = NewClient(live.Client(), []string{dead}, 1).Do(context.Background(), 0, Request{Method: http.MethodGet, Path: "/x"})
	assert.Error(t, err)
}
