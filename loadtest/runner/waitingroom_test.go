package runner

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSmokeWaitingRoom: the waiting-room row on three processes with buyer identity on (the
// tool's own key and tokens): every unit sold through the door, each order with its pass, an
// order without one refused on every instance, admission near its configured rate, and the same
// crowd with no door beside it; both sales verified.
func TestSmokeWaitingRoom(t *testing.T) {
	out := smoke(t, "-waiting-room", "100", "-stock", "60", "-users", "300", "-concurrency", "32")
	row := regexp.MustCompile(`(?m)^\| waiting room \| ([0-9]+) \(([0-9]+) admitted, [0-9]+ sent home sold out\) \| ([0-9]+) \(100\) \|`).FindStringSubmatch(out)
	require.NotNil(t, row, "the waiting-room row")
	assert.Equal(t, "60", row[1], "every unit sold through the door")
	admitted, _ := strconv.Atoi(row[2])
	assert.GreaterOrEqual(t, admitted, 60, "no order without a pass: every order's buyer was admitted")
	rate, _ := strconv.Atoi(row[3])
	assert.InDelta(t, 100, rate, 50, "admission near its configured rate (a small crowd: the polls' spacing weighs)")
	assert.Regexp(t, `(?m)^\| no door \| 60 \| `, out, "the same crowd with no door sells the same units")
	assert.Regexp(t, "(?m)^Measured by `go run ./loadtest -waiting-room 100 .*` at commit \\S+ on [0-9]+ cores, ", out)
}

// TestDoorSummary: the admission rate is read from the positions the buyers heard, and how far
// admission strays from join order is counted in places.
func TestDoorSummary(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var visits []visit
	for i := range 100 {
		// Buyer i joins at i ms, hears it has i places ahead, and is let in at 1 s + 10 ms a
		// place: 100 a second, as its positions falling say.
		joined, admitted := t0.Add(time.Duration(i)*time.Millisecond), t0.Add(time.Second+time.Duration(i)*10*time.Millisecond)
		v := visit{joined: joined, admitted: admitted, ordered: t0.Add(2 * time.Second)}
		v.heard(map[string]any{"position": float64(i)}, joined)
		v.heard(map[string]any{"position": float64(0)}, joined.Add(time.Duration(i)*10*time.Millisecond))
		visits = append(visits, v)
	}
	visits[3].admitted, visits[4].admitted = visits[4].admitted, visits[3].admitted // one pair swapped
	visits = append(visits, visit{ended: "sold_out"})
	r := summarizeDoor(visits, 100)
	assert.Equal(t, 100, r.admitted)
	assert.Equal(t, 1, r.soldOutInLine)
	assert.InDelta(t, 100, r.rate, 0.5)
	assert.Equal(t, 0, r.strayP50)
	assert.Equal(t, 1, r.strayMax, "the swapped pair is one place off")
	assert.Equal(t, time.Second+49*9*time.Millisecond, r.joinToPass[0], "join to pass of the median buyer (the 50th: 1 s + 9 ms a place)")
}

// TestWaitingRoomFlags: the row is one of its own, on processes the tool starts.
func TestWaitingRoomFlags(t *testing.T) {
	_, err := parse([]string{"-waiting-room", "100", "-target", "http://x", "-token", "t"}, testWriter{t})
	assert.ErrorIs(t, err, errNoWaitingRoomTarget)
	_, err = parse([]string{"-waiting-room", "-1"}, testWriter{t})
	assert.Error(t, err)
	o, err := parse([]string{"-waiting-room", "500", "-users", "20000", "-stock", "5000"}, testWriter{t})
	require.NoError(t, err)
	assert.Equal(t, 500, o.waitingRoom)
}
