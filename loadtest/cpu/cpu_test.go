package cpu

import (
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCPUSeconds: utime + stime of /proc/<pid>/stat, read by procfs: not the fields of a command
// name with spaces and parentheses, not the children's (cutime, cstime); and growing with the
// CPU a process burns.
func TestCPUSeconds(t *testing.T) {
	fake := func(stat string) procfs.Proc {
		dir := t.TempDir()
		require.NoError(t, os.Mkdir(filepath.Join(dir, "4242"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "4242", "stat"), []byte(stat), 0o644))
		fs, err := procfs.NewFS(dir)
		require.NoError(t, err)
		p, err := fs.Proc(4242)
		require.NoError(t, err)
		return p
	}
	s, err := cpuSeconds(fake("4242 (a (b) c) R 1 4242 4242 0 -1 4194304 100 0 0 0 70 30 5 6 20 0 3 0 12345 3133440 410 18446744073709551615 " +
		"1 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 1 1 1 1 1 1 1 0\n"))
	require.NoError(t, err)
	assert.InDelta(t, 1.0, s, 1e-9, "utime 70 + stime 30 ticks, not fields of the command name, not the children's 5 + 6")
	_, err = cpuSeconds(fake("4242 (seckill) R 1 2"))
	assert.Error(t, err, "too few fields")
	_, err = cpuSeconds(fake("4242 seckill R"))
	assert.Error(t, err, "no command name")

	self, err := procfs.Self()
	require.NoError(t, err)
	before, err := cpuSeconds(self)
	require.NoError(t, err)
	began := time.Now()
	for time.Since(began) < 300*time.Millisecond {
	}
	after, err := cpuSeconds(self)
	require.NoError(t, err)
	elapsed := time.Since(began)
	assert.Greater(t, after, before, "300 ms of spinning shows in utime")
	assert.LessOrEqual(t, after-before, elapsed.Seconds()*float64(runtime.NumCPU())+0.02,
		"no more than every core for the whole time: ticks, not another counter")
}

// TestCPURecording: a phase's CPU is interpolated between the samples around its ends, per 1000
// of its orders; a group that was not measured, or whose process went away, is n/a.
func TestCPURecording(t *testing.T) {
	t0 := time.Now()
	m := &Meter{groups: []Group{{name: Service, pids: []int{1}}, {name: Redis, na: "embedded"}}}
	rec := &Recording{meter: m, samples: []sample{
		{at: t0, seconds: []float64{0, math.NaN()}},
		{at: t0.Add(100 * time.Millisecond), seconds: []float64{0.1, math.NaN()}},
		{at: t0.Add(200 * time.Millisecond), seconds: []float64{0.3, math.NaN()}},
	}}
	u := rec.Between(t0.Add(50*time.Millisecond), t0.Add(150*time.Millisecond))
	assert.Equal(t, 100*time.Millisecond, u.wall)
	assert.InDelta(t, 0.15, u.seconds[0], 1e-9, "5 ticks at 50 ms, 20 at 150 ms")
	assert.InDelta(t, 0.30, rec.Whole().seconds[0], 1e-9)
	assert.InDelta(t, 0.60, u.Add(rec.Whole()).Add(u).seconds[0], 1e-9, "slices add up")

	p := m.Phase(u, 10)
	require.Len(t, p.Groups, 2)
	require.NotNil(t, p.Groups[0].SecondsPer1000)
	assert.InDelta(t, 15.0, *p.Groups[0].SecondsPer1000, 1e-9)
	assert.Nil(t, p.Groups[1].Seconds)
	assert.Equal(t, "embedded", p.Groups[1].NA)
	total, all := p.Total()
	assert.InDelta(t, 0.15, total, 1e-9)
	assert.False(t, all)

	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	live := &Meter{groups: []Group{{name: Load, pids: []int{os.Getpid()}}, {name: Etcd, pids: []int{gone.Process.Pid}}}}
	r := live.Start()
	for began := time.Now(); time.Since(began) < 200*time.Millisecond; {
	}
	r.Stop()
	assert.Greater(t, len(r.samples), 2, "sampled while it ran")
	lp := live.Phase(r.Whole(), 1)
	require.NotNil(t, lp.Groups[0].Seconds)
	assert.Positive(t, *lp.Groups[0].Seconds, "the spinning shows")
	assert.Contains(t, lp.Groups[1].NA, "ended or could not be read")
}

// TestCPUGroups: the groups are found by the port they listen on when on this machine, and are
// n/a with the reason when not.
func TestCPUGroups(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	pids, na := listenerPIDs(ln.Addr().String())
	assert.Empty(t, na)
	assert.Contains(t, pids, os.Getpid(), "the test process listens there")
	_, na = listenerPIDs("192.0.2.1:6379", "redis-server")
	assert.Equal(t, "192.0.2.1 is not this machine", na)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := closed.Addr().String()
	require.NoError(t, closed.Close())
	_, na = listenerPIDs(addr)
	assert.Equal(t, "no process found listening on "+addr, na)

	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	local := Services([]string{srv.URL}, nil)
	assert.Empty(t, local.na)
	assert.Contains(t, local.pids, os.Getpid(), "a -target on this machine is found by its port")
	assert.Equal(t, []int{7, 8}, Services(nil, []int{7, 8}).pids, "the processes the tool started")
	assert.Equal(t, "-target http://192.0.2.1:8080: 192.0.2.1 is not this machine", Services([]string{"http://192.0.2.1:8080"}, nil).na)

	remote := Backends(Run{MySQL: "u:p@tcp(192.0.2.1:3306)/db"})
	byName := map[string]Group{}
	for _, g := range remote {
		byName[g.name] = g
	}
	assert.Equal(t, "192.0.2.1 is not this machine", byName[Database].na)
	assert.Equal(t, "no -redis: the targets' Redis is not known", byName[Redis].na)
	assert.Equal(t, "the targets' own (-target)", byName[Etcd].na)
	assert.Equal(t, []int{os.Getpid()}, byName[Load].pids)
	assert.NotContains(t, byName, ZooKeeper, "no -zk: no ZooKeeper column")
	assert.NotContains(t, byName, NATS, "no NATS: no NATS column")
	assert.Equal(t, "192.0.2.7:4222: 192.0.2.7 is not this machine",
		Backends(Run{NATS: "nats://192.0.2.7:4222"})[3].na, "a NATS URL is found by its host and port")
	assert.Equal(t, "127.0.0.1:4223,127.0.0.1:4224", natsAddresses("nats://127.0.0.1:4223, 127.0.0.1:4224"))
	embedded := Backends(Run{Spawned: true, EtcdPID: 42})
	assert.Contains(t, embedded[0].na, "embedded SQLite")
	assert.Contains(t, embedded[1].na, "embedded (miniredis)")
	assert.Equal(t, []int{42}, embedded[2].pids)
}
