package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// resetPeakRSS makes the kernel forget a process's peak resident set size, so that the next
// readPeakRSS tells the peak of what ran since (Linux: "5" into /proc/<pid>/clear_refs). Without
// it every row would carry the peak of the rows before it on the same processes.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// readPeakRSS is a process's peak resident set size in bytes: VmHWM in /proc/<pid>/status. It is
// read from outside because the peak under load is the figure that matters, and /metrics can
// only tell the size at the moment it is scraped.
func readPeakRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parsePeakRSS(raw)
}

// parsePeakRSS reads VmHWM from the text of /proc/<pid>/status.
func parsePeakRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(v), " kB")
		if !ok {
			return 0, fmt.Errorf("VmHWM: unexpected unit in %q", v)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(kb), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmHWM: %w", err)
		}
		return n << 10, nil
	}
	return 0, errors.New("no VmHWM in /proc/<pid>/status")
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
		n, err := readPeakRSS(pid)
		if err != nil {
			return 0, fmt.Errorf("peak RSS of process %d: %w", pid, err)
		}
		top = max(top, n)
	}
	return float64(top) / (1 << 20), nil
}
