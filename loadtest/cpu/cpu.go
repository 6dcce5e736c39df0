// Package cpu accounts for what a sale costs in CPU, per process group (the service instances,
// the database, Redis, etcd, ZooKeeper, NATS, the load generator), from /proc/<pid>/stat: it finds
// each group's processes, samples their CPU time while a phase runs, and gives the seconds a
// phase used, per 1000 orders or answers. prometheus/procfs reads /proc.
package cpu

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/procfs"
)

// What a sale costs in CPU, per process group and per 1000 orders (selling) or answers (sold
// out), read from /proc: on a 2-core machine that runs everything, orders/s says only where this
// machine ran out; the cost per order says what each part would need elsewhere. The service
// instances scale out; the database and Redis hold the one hot product; the load generator is
// not part of a real sale at all.

// sampleEvery is how often a recording reads the groups while a phase runs: the selling
// phase ends at the last sale's answer, which is known only afterwards, so its end is
// interpolated between samples. The kernel counts CPU time in ticks of 10 ms (USER_HZ): 50 ms is
// five ticks per process.
const sampleEvery = 50 * time.Millisecond

// The process groups, the columns of the CPU tables.
const (
	Service   = "service instances"
	Database  = "database"
	Redis     = "Redis"
	Etcd      = "etcd"
	ZooKeeper = "ZooKeeper"
	NATS      = "NATS"
	Load      = "load generator"
)

// Group is a set of processes whose CPU time is reported together.
type Group struct {
	name string
	pids []int
	na   string // why the group is not measured ("" when it is): not on this machine, embedded in another group
}

// cpuSeconds is a process's CPU time so far, user and system (utime + stime of
// /proc/<pid>/stat): its own, not that of the children it waited for.
func cpuSeconds(p procfs.Proc) (float64, error) {
	s, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return s.CPUTime(), nil
}

// Meter reads the CPU time of the groups of one pass.
type Meter struct{ groups []Group }

// NewMeter is a meter of groups, which are the columns of its phases in this order.
func NewMeter(groups ...Group) *Meter { return &Meter{groups: groups} }

// sample is every group's CPU seconds at one moment; NaN for a group not measured, or one of
// whose processes could not be read (it ended).
type sample struct {
	at      time.Time
	seconds []float64
}

func (m *Meter) read() sample {
	s := sample{at: time.Now(), seconds: make([]float64, len(m.groups))}
	for i, g := range m.groups {
		if g.na != "" {
			s.seconds[i] = math.NaN()
			continue
		}
		for _, pid := range g.pids {
			p, err := procfs.NewProc(pid)
			var t float64
			if err == nil {
				t, err = cpuSeconds(p)
			}
			if err != nil {
				s.seconds[i] = math.NaN()
				break
			}
			s.seconds[i] += t
		}
	}
	return s
}

// Recording samples the groups from start until stop.
type Recording struct {
	meter   *Meter
	mu      sync.Mutex
	samples []sample
	done    chan struct{}
	stopped chan struct{}
}

// Start begins a recording.
func (m *Meter) Start() *Recording {
	rec := &Recording{meter: m, samples: []sample{m.read()}, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(rec.stopped)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-rec.done:
				return
			case <-tick.C:
				s := m.read()
				rec.mu.Lock()
				rec.samples = append(rec.samples, s)
				rec.mu.Unlock()
			}
		}
	}()
	return rec
}

// Stop ends the recording with a last sample.
func (rec *Recording) Stop() {
	close(rec.done)
	<-rec.stopped
	rec.samples = append(rec.samples, rec.meter.read())
}

// at is every group's CPU time at t, interpolated between the samples around it. It may be
// asked while the recording goes on: the samples so far are taken under the lock.
func (rec *Recording) at(t time.Time) []float64 {
	rec.mu.Lock()
	s := rec.samples
	rec.mu.Unlock()
	j := sort.Search(len(s), func(i int) bool { return !s[i].at.Before(t) })
	switch {
	case j == 0:
		return s[0].seconds
	case j == len(s):
		return s[len(s)-1].seconds
	}
	p, q := s[j-1], s[j]
	f := float64(t.Sub(p.at)) / float64(q.at.Sub(p.at))
	out := make([]float64, len(p.seconds))
	for i := range out {
		out[i] = p.seconds[i] + f*(q.seconds[i]-p.seconds[i])
	}
	return out
}

// Between is what each group used from from to to.
func (rec *Recording) Between(from, to time.Time) Use {
	a, b := rec.at(from), rec.at(to)
	u := Use{wall: to.Sub(from), seconds: make([]float64, len(a))}
	for i := range a {
		u.seconds[i] = b[i] - a[i]
	}
	return u
}

// Whole is what each group used over the whole recording.
func (rec *Recording) Whole() Use {
	return rec.Between(rec.samples[0].at, rec.samples[len(rec.samples)-1].at)
}

// Use is the CPU seconds of each group over some wall time (NaN: not measured).
type Use struct {
	wall    time.Duration
	seconds []float64
}

// Add is u and v together: the slices of one phase.
func (u Use) Add(v Use) Use {
	if u.seconds == nil {
		return v
	}
	out := Use{wall: u.wall + v.wall, seconds: slices.Clone(u.seconds)}
	for i := range out.seconds {
		out.seconds[i] += v.seconds[i]
	}
	return out
}

// Cost is what a row's phases cost in CPU, per group.
type Cost struct {
	Selling *Phase `json:"selling,omitempty"`
	SoldOut *Phase `json:"sold_out,omitempty"` // the steady sold-out phase (-soldout), the service's slices only
}

// Phase is one phase's CPU, per group: Count is its orders (selling) or its answers (sold out).
type Phase struct {
	Count       int         `json:"count"`
	WallSeconds float64     `json:"wall_seconds"`
	Groups      []GroupCost `json:"groups"`
}

// GroupCost is one group's CPU in one phase; NA says why it was not measured.
type GroupCost struct {
	Group          string   `json:"group"`
	Seconds        *float64 `json:"cpu_seconds,omitempty"`
	SecondsPer1000 *float64 `json:"cpu_seconds_per_1000,omitempty"`
	NA             string   `json:"na,omitempty"`
}

// Phase is the cost of a phase that used u and counted count orders or answers.
func (m *Meter) Phase(u Use, count int) *Phase {
	p := &Phase{Count: count, WallSeconds: u.wall.Seconds()}
	for i, g := range m.groups {
		c := GroupCost{Group: g.name, NA: g.na}
		switch {
		case g.na != "":
		case u.seconds == nil || math.IsNaN(u.seconds[i]):
			c.NA = "a process of the group ended or could not be read during the phase"
		default:
			s := u.seconds[i]
			c.Seconds = &s
			if count > 0 {
				per := 1000 * s / float64(count)
				c.SecondsPer1000 = &per
			}
		}
		p.Groups = append(p.Groups, c)
	}
	return p
}

// Total is the CPU seconds of every measured group, and whether every group was measured.
func (p *Phase) Total() (seconds float64, all bool) {
	all = true
	for _, g := range p.Groups {
		if g.Seconds == nil {
			all = false
			continue
		}
		seconds += *g.Seconds
	}
	return seconds, all
}

// Services is the group of the pass's service instances: the processes the tool started, or
// with -target those listening on the targets' ports, when they are on this machine.
func Services(targets []string, pids []int) Group {
	g := Group{name: Service, pids: pids}
	if len(pids) > 0 {
		return g
	}
	for _, t := range targets {
		u, err := url.Parse(t)
		if err != nil {
			return Group{name: Service, na: fmt.Sprintf("-target %s: %v", t, err)}
		}
		found, na := listenerPIDs(hostPort(u))
		if na != "" {
			return Group{name: Service, na: "-target " + t + ": " + na}
		}
		g.pids = append(g.pids, found...)
	}
	return g
}

// hostPort is u's host and port, its scheme's when it has none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Host + ":443"
	}
	return u.Host + ":80"
}

// Run is what the CPU groups of a run are found from: its backends, and whether the tool started
// the service processes itself.
type Run struct {
	MySQL     string // the -mysql DSN; "": the processes' embedded SQLite, or unknown with -target
	Redis     string // the -redis addresses; "": the first process's embedded Redis, or unknown
	ZooKeeper string // the -zk addresses; "": no ZooKeeper
	NATS      string // the NATS URLs of the service (-nats, or the server the tool started); "": none, or embedded in the service
	Spawned   bool   // the tool started the service processes (no -target)
	EtcdPID   int    // the etcd process the tool started for them; 0 with -target
}

// Backends are the groups that stay for the whole run: the database, Redis, etcd, ZooKeeper
// and NATS (when the run has them) and the load generator itself.
func Backends(o Run) []Group {
	var out []Group
	switch {
	case o.MySQL != "":
		out = append(out, databaseGroup(o.MySQL))
	case o.Spawned:
		out = append(out, Group{name: Database, na: "embedded SQLite in the service instances: counted there"})
	default:
		out = append(out, Group{name: Database, na: "no -mysql: the targets' database is not known"})
	}
	switch {
	case o.Redis != "":
		out = append(out, addressesGroup(Redis, o.Redis, "redis-server"))
	case o.Spawned:
		out = append(out, Group{name: Redis, na: "embedded (miniredis) in the first service instance: counted there"})
	default:
		out = append(out, Group{name: Redis, na: "no -redis: the targets' Redis is not known"})
	}
	if o.EtcdPID > 0 {
		out = append(out, Group{name: Etcd, pids: []int{o.EtcdPID}})
	} else {
		out = append(out, Group{name: Etcd, na: "the targets' own (-target)"})
	}
	if o.ZooKeeper != "" {
		out = append(out, addressesGroup(ZooKeeper, o.ZooKeeper, "java"))
	}
	if o.NATS != "" {
		out = append(out, addressesGroup(NATS, natsAddresses(o.NATS), "nats-server"))
	}
	return append(out, Group{name: Load, pids: []int{os.Getpid()}})
}

// natsAddresses is the host:port list of a comma-separated list of NATS URLs (nats://host:port,
// or host:port alone).
func natsAddresses(urls string) string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if parsed, err := url.Parse(u); err == nil && parsed.Host != "" {
			u = parsed.Host
		}
		out = append(out, u)
	}
	return strings.Join(out, ",")
}

// databaseGroup is the database server of dsn, when it is on this machine.
func databaseGroup(dsn string) Group {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return Group{name: Database, na: err.Error()}
	}
	if cfg.Net == "unix" {
		pids := namedPIDs("", "mariadbd", "mysqld")
		if len(pids) != 1 {
			return Group{name: Database, na: fmt.Sprintf("the DSN's socket %s: %d mariadbd/mysqld processes, not one", cfg.Addr, len(pids))}
		}
		return Group{name: Database, pids: pids}
	}
	pids, na := listenerPIDs(cfg.Addr, "mariadbd", "mysqld")
	return Group{name: Database, pids: pids, na: na}
}

// addressesGroup is the servers at a comma-separated list of host:port, when they are all on
// this machine; comm names their processes, for when the sockets cannot be traced.
func addressesGroup(name, addrs, comm string) Group {
	g := Group{name: name}
	for _, addr := range strings.Split(addrs, ",") {
		addr = strings.TrimSpace(addr)
		pids, na := listenerPIDs(addr, comm)
		if na != "" {
			return Group{name: name, na: addr + ": " + na}
		}
		g.pids = append(g.pids, pids...)
	}
	return g
}

// listenerPIDs finds the processes listening on addr's port, if addr's host is this machine:
// the socket's inode from /proc/net/tcp and tcp6, then the processes holding it. Reading another
// user's file descriptors takes privileges; without them, the processes named comm are taken
// instead, those whose command line names the port, or the only one. na says why none was
// found.
func listenerPIDs(addr string, comm ...string) (pids []int, na string) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err.Error()
	}
	if !localHost(host) {
		return nil, host + " is not this machine"
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Sprintf("port %q: %v", portText, err)
	}
	if pids = socketOwners(listeningInodes(port)); len(pids) > 0 {
		return pids, ""
	}
	if len(comm) > 0 {
		if pids = namedPIDs(portText, comm...); len(pids) > 0 {
			return pids, ""
		}
	}
	return nil, fmt.Sprintf("no process found listening on %s", addr)
}

// localHost reports whether host names this machine: empty, localhost, a loopback address or one
// of its interfaces'.
func localHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(ip)
	})
}

// tcpListen is the state of a listening socket in /proc/net/tcp (TCP_LISTEN, 0A).
const tcpListen = 10

// listeningInodes are the inodes of the TCP sockets listening on port, from /proc/net/tcp and
// tcp6. A file that cannot be read (no IPv6) is passed over.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return out
	}
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		sockets, err := read()
		if err != nil {
			continue
		}
		for _, s := range sockets {
			if s.St == tcpListen && s.LocalPort == uint64(port) {
				out[strconv.FormatUint(s.Inode, 10)] = true
			}
		}
	}
	return out
}

// socketOwners are the processes holding a socket of inodes open: a file descriptor of theirs
// links to socket:[inode]. Processes whose descriptors cannot be read are passed over.
func socketOwners(inodes map[string]bool) []int {
	if len(inodes) == 0 {
		return nil
	}
	var out []int
	for _, p := range allProcs() {
		targets, err := p.FileDescriptorTargets()
		if err != nil {
			continue
		}
		if slices.ContainsFunc(targets, func(link string) bool {
			inode, ok := strings.CutPrefix(link, "socket:[")
			return ok && inodes[strings.TrimSuffix(inode, "]")]
		}) {
			out = append(out, p.PID)
		}
	}
	return out
}

// namedPIDs are the processes whose command name is one of comms: those whose command line
// names port (an argument that is it, or ends in =port or :port) if any does, else the only one.
// An argument is split at spaces too: Redis rewrites its command line as one ("redis-server
// 127.0.0.1:6379").
func namedPIDs(port string, comms ...string) []int {
	var named, withPort []int
	for _, p := range allProcs() {
		comm, err := p.Comm()
		if err != nil || !slices.Contains(comms, comm) {
			continue
		}
		named = append(named, p.PID)
		cmdline, _ := p.CmdLine()
		if slices.ContainsFunc(strings.Fields(strings.Join(cmdline, " ")), func(arg string) bool {
			return port != "" && (arg == port || strings.HasSuffix(arg, "="+port) || strings.HasSuffix(arg, ":"+port))
		}) {
			withPort = append(withPort, p.PID)
		}
	}
	switch {
	case len(withPort) > 0:
		return withPort
	case len(named) == 1:
		return named
	}
	return nil
}

// allProcs are the processes of this machine (as /proc shows them).
func allProcs() procfs.Procs {
	procs, _ := procfs.AllProcs()
	return procs
}
