// Package etcdserver runs real etcd members inside the process (go.etcd.io/etcd/server/v3/embed),
// on free loopback ports, with quiet logs: the same server code as a production etcd. It starts
// the service's embedded default (internal/embeddedetcd), the tests' etcd and clusters, the
// lab's, and the etcd process the load tool gives the instances it spawns. It is public so that
// the load tool, a black box of the service, starts its etcd the same way.
package etcdserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Member is one running etcd member.
type Member struct {
	Name      string
	ClientURL string
	etcd      *embed.Etcd
	closeOnce sync.Once
}

// Start starts a single-member cluster keeping its data in dir.
func Start(dir string) (*Member, error) {
	members, err := StartCluster(dir, 1)
	if err != nil {
		return nil, err
	}
	return members[0], nil
}

// StartCluster starts n members forming one new cluster, each keeping its data under dir, and
// waits until the cluster has a leader. The free ports it picks can be taken by another process
// before a member binds them; it then starts over on new ports, up to three times.
func StartCluster(dir string, n int) ([]*Member, error) {
	var err error
	for attempt := range 3 {
		var members []*Member
		members, err = startCluster(filepath.Join(dir, fmt.Sprintf("attempt-%d", attempt)), n)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			return members, err
		}
	}
	return nil, err
}

func startCluster(dir string, n int) ([]*Member, error) {
	cfgs := make([]*embed.Config, n)
	var initial []string
	for i := range n {
		peer, err := freeURL()
		if err != nil {
			return nil, err
		}
		client, err := freeURL()
		if err != nil {
			return nil, err
		}
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("seckill-%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
		cfg.InitialClusterToken = "seckill"
		// Quiet: etcd's own log goes to a file beside its data, not to the service's terminal
		// (it logs its normal shutdown at error level).
		cfg.LogLevel = "warn"
		cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
		cfgs[i] = cfg
		initial = append(initial, cfg.Name+"="+peer.String())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var members []*Member
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			Close(members...)
			return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, err)
		}
		members = append(members, &Member{Name: cfg.Name, ClientURL: cfg.AdvertiseClientUrls[0].String(), etcd: e})
	}
	for _, m := range members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			Close(members...)
			return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
		case <-time.After(60 * time.Second):
			Close(members...)
			return nil, errors.New("etcd did not become ready within 60s")
		}
	}
	return members, nil
}

// freeURL returns an http URL on a free loopback port.
func freeURL() (*url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	return url.Parse("http://" + ln.Addr().String())
}

// Close stops the members.
func Close(members ...*Member) {
	for _, m := range members {
		m.Close()
	}
}

// Close stops the member and waits until it has stopped, for at most ten seconds: etcd's Close
// can wait forever for a member that never became ready (one whose peers failed to start). It
// may be called more than once.
func (m *Member) Close() {
	m.closeOnce.Do(func() {
		done := make(chan struct{})
		go func() { m.etcd.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
}

// Endpoints are the client URLs of members.
func Endpoints(members ...*Member) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.ClientURL
	}
	return out
}
