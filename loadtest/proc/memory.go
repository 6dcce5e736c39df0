package proc

import (
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/procfs"
)

// resetPeakRSS makes the kernel forget a process's peak resident set size, so that the next
// peakRSS tells the peak of what ran since (Linux: "5" into /proc/<pid>/clear_refs). Without
// it every row would carry the peak of the rows before it on the same processes.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// peakRSS is a process's peak resident set size in bytes: VmHWM in /proc/<pid>/status. It is
// read from outside because the peak under load is the figure that matters, and /metrics can
// only tell the size at the moment it is scraped.
func peakRSS(p procfs.Proc) (int64, error) {
	s, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	if s.VmHWM == 0 {
		return 0, errors.New("no VmHWM in /proc/<pid>/status")
	}
	return int64(s.VmHWM), nil
}

// Peaks measures the service processes' memory over a stretch of work: reset, then read back.
type Peaks struct {
	PIDs       []int
	SinceStart bool // the reset failed: the figures include everything since each process started
}

// Begin starts the stretch.
func (p *Peaks) Begin() {
	p.SinceStart = false
	for _, pid := range p.PIDs {
		if resetPeakRSS(pid) != nil {
			p.SinceStart = true
		}
	}
}

// Highest is the highest peak of the stretch over every process, in MB (2^20 bytes).
func (p *Peaks) Highest() (float64, error) {
	var top int64
	for _, pid := range p.PIDs {
		proc, err := procfs.NewProc(pid)
		var n int64
		if err == nil {
			n, err = peakRSS(proc)
		}
		if err != nil {
			return 0, fmt.Errorf("peak RSS of process %d: %w", pid, err)
		}
		top = max(top, n)
	}
	return float64(top) / (1 << 20), nil
}
