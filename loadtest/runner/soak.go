package runner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// sample is what one instance's /metrics said at one moment: the figures that grow when
// something leaks.
type sample struct {
	Goroutines  float64 // go_goroutines
	RSS         float64 // process_resident_memory_bytes
	HeapInUse   float64 // go_memstats_heap_inuse_bytes
	OpenConns   float64 // go_sql_open_connections{db_name="seckill"}
	Sessions    float64 // seckill_etcd_sessions_total, over the etcd strategies
	LocksLost   float64 // seckill_lock_lost_total, all strategies
	HeldTooLong float64 // seckill_lock_held_too_long_total, all strategies

	Locks    map[seriesKey]*histogram // the lock wait and hold histograms, by strategy: read at each row's start and end
	Counters map[seriesKey]float64    // the counters of a guard at work (guardCounters), by strategy: read around each sale under a fault
}

// sampleMetrics scrapes base's /metrics.
func sampleMetrics(ctx context.Context, client *http.Client, base string) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return sample{}, err
	}
	var s sample
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
				s.Counters = map[seriesKey]float64{}
			}
			s.Counters[seriesKey{metric, labelValue(name, "strategy")}] += v
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

// growth compares an instance's sample after the first round with its last one and names what
// grew beyond the noise of a busy process: goroutines and memory that keep growing round after
// round, connections above the pool, sessions renewed without a fault.
func growth(first, last sample) []string {
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

// leftoverLocks counts the Redis lock keys still present: after a quiet moment there must be
// none, or a holder did not release.
func leftoverLocks(ctx context.Context, addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(ctx, "seckill:{*}:lock").Result()
	return len(keys), err
}

// soakReport prints the first and last samples of every instance and the problems found.
func soakReport(w io.Writer, targets []string, first, last []sample, rounds int, elapsed time.Duration) []string {
	fmt.Fprintf(w, "\nsoak: %d rounds in %s\n\n", rounds, elapsed.Round(time.Second))
	fmt.Fprintln(w, "| instance | goroutines | RSS MB | heap MB | open DB conns | etcd sessions | locks lost | held too long |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	var problems []string
	for i, target := range targets {
		f, l := first[i], last[i]
		fmt.Fprintf(w, "| %s | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f |\n",
			target, f.Goroutines, l.Goroutines, f.RSS/(1<<20), l.RSS/(1<<20), f.HeapInUse/(1<<20), l.HeapInUse/(1<<20),
			f.OpenConns, l.OpenConns, f.Sessions, l.Sessions, f.LocksLost, l.LocksLost, f.HeldTooLong, l.HeldTooLong)
		for _, p := range growth(f, l) {
			problems = append(problems, target+": "+p)
		}
	}
	return problems
}
