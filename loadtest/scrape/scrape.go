// Package scrape reads what a service instance's /metrics says (Read) — the figures that grow
// when something leaks, the lock wait and hold histograms by strategy, the counters of a guard
// at work — and what the lock histograms grew by over a row (NewLockTimes).
package scrape

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The counters of /metrics (by strategy) that show a guarded strategy's guard at work under a
// fault (README, Metrics).
const (
	Retries   = "seckill_optimistic_retries_total" // a version-guarded write retried after a concurrent change
	FencedOut = "seckill_fenced_out_total"         // a write refused because a newer holder had written
	LockLost  = "seckill_lock_lost_total"          // a lock its holder found expired or taken over at release
)

// guardCounters are the counters Read keeps by strategy.
var guardCounters = []string{Retries, FencedOut, LockLost}

// Sample is what one instance's /metrics said at one moment: the figures that grow when
// something leaks.
type Sample struct {
	Goroutines  float64 // go_goroutines
	RSS         float64 // process_resident_memory_bytes
	HeapInUse   float64 // go_memstats_heap_inuse_bytes
	OpenConns   float64 // go_sql_open_connections{db_name="seckill"}
	Sessions    float64 // seckill_etcd_sessions_total, over the etcd strategies
	LocksLost   float64 // seckill_lock_lost_total, all strategies
	HeldTooLong float64 // seckill_lock_held_too_long_total, all strategies

	Locks    map[Series]*Histogram // the lock wait and hold histograms, by strategy: read at each row's start and end
	Counters map[Series]float64    // the counters of a guard at work (guardCounters), by strategy: read around each sale under a fault
}

// Read scrapes base's /metrics.
func Read(ctx context.Context, client *http.Client, base string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return Sample{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Sample{}, err
	}
	var s Sample
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		metric, _, _ := strings.Cut(name, "{")
		if s.addLockSeries(metric, name, v) {
			continue
		}
		if slices.Contains(guardCounters, metric) {
			if s.Counters == nil {
				s.Counters = map[Series]float64{}
			}
			s.Counters[Series{metric, labelValue(name, "strategy")}] += v
		}
		switch metric {
		case "go_goroutines":
			s.Goroutines = v
		case "process_resident_memory_bytes":
			s.RSS = v
		case "go_memstats_heap_inuse_bytes":
			s.HeapInUse = v
		case "go_sql_open_connections":
			s.OpenConns = v
		case "seckill_etcd_sessions_total":
			s.Sessions += v // one series per etcd strategy (a session each)
		case "seckill_lock_lost_total":
			s.LocksLost += v
		case "seckill_lock_held_too_long_total":
			s.HeldTooLong += v
		}
	}
	return s, nil
}

// Growth compares an instance's Sample after the first round with its last one and names what
// grew beyond the noise of a busy process: goroutines and memory that keep growing round after
// round, connections above the pool, sessions renewed without a fault.
func Growth(first, last Sample) []string {
	var problems []string
	if last.Goroutines > first.Goroutines*1.5+25 {
		problems = append(problems, fmt.Sprintf("goroutines grew from %.0f to %.0f", first.Goroutines, last.Goroutines))
	}
	if last.RSS > first.RSS*1.5+32<<20 {
		problems = append(problems, fmt.Sprintf("resident memory grew from %.0f MB to %.0f MB", first.RSS/(1<<20), last.RSS/(1<<20)))
	}
	if last.HeapInUse > first.HeapInUse*2+32<<20 {
		problems = append(problems, fmt.Sprintf("heap in use grew from %.0f MB to %.0f MB", first.HeapInUse/(1<<20), last.HeapInUse/(1<<20)))
	}
	if last.Sessions > first.Sessions {
		problems = append(problems, fmt.Sprintf("etcd sessions renewed %.0f times without a fault", last.Sessions-first.Sessions))
	}
	return problems
}
