//go:build freezepoints

package freezepoint

import (
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// Built is whether this binary can freeze itself (the freezepoints tag).
const Built = true

// armed is the moment SECKILL_FREEZE_AT names and how many times it passes before the stop
// (SECKILL_FREEZE_AFTER, default 100: mid-sale, once the instance sells at its pace).
var armed = sync.OnceValues(func() (Point, int64) {
	after, err := strconv.ParseInt(os.Getenv("SECKILL_FREEZE_AFTER"), 10, 64)
	if err != nil || after < 1 {
		after = 100
	}
	return Point(os.Getenv("SECKILL_FREEZE_AT")), after
})

var (
	passed atomic.Int64
	stop   sync.Once
)

// At stops the process the armed time it passes the armed point, once, saying so first on
// stderr with its own clock: the test measures the others' stall from that time.
func At(p Point) {
	point, after := armed()
	if p != point || passed.Add(1) != after {
		return
	}
	stop.Do(func() {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Warn("freezing", "point", string(p))
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	})
}
