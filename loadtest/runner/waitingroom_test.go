package runner

import (
	"regexp"
	"strconv"
	"testing"

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
