package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/devserver/natsserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/loadtest/proc"
)

// etcdDirEnv, when set, turns the tool's own binary into an etcd server keeping its data in
// that directory, on loopback ports of its own. The tool starts one this way for the service
// processes it spawns, so that they are alike: with the first instance's embedded etcd, that
// instance would also serve every other instance's locks, and its figures would carry that load.
const etcdDirEnv = "LOADTEST_ETCD_DIR"

// serveEtcd is the etcd process: one member on free loopback ports, which prints "listening on
// <client URL>" on stdout the way cmd/api does, so that start can read it, and serves until ctx
// ends.
func serveEtcd(ctx context.Context, dir string, stdout io.Writer) error {
	data := filepath.Join(dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	m, err := etcdserver.Start(data)
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Fprintf(stdout, "listening on %s\n", m.ClientURL)
	<-ctx.Done()
	return nil
}

// startEtcdProcess starts the etcd process for the spawned service instances.
func startEtcdProcess(ctx context.Context, dir string, logs io.Writer) (*proc.Instance, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	dir = filepath.Join(dir, "etcd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	inst, err := proc.Start(ctx, exe, append(os.Environ(), etcdDirEnv+"="+dir), filepath.Join(dir, "process.log"))
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	fmt.Fprintf(logs, "loadtest: etcd for the service processes at %s\n", inst.URL)
	return inst, nil
}

// zkStart is the -zk value that has the tool start a ZooKeeper server for the processes.
const zkStart = "start"

// startZooKeeper starts a standalone ZooKeeper server (Debian's package) for the spawned service
// instances, as the tests do.
func startZooKeeper(dir string, logs io.Writer) (*zkserver.Server, error) {
	if err := zkserver.Available(); err != nil {
		return nil, fmt.Errorf("-zk start: %w", err)
	}
	servers, err := zkserver.New(filepath.Join(dir, "zookeeper"), 1)
	if err != nil {
		return nil, err
	}
	if err := servers[0].Start(); err != nil {
		return nil, fmt.Errorf("-zk start: %w", err)
	}
	fmt.Fprintf(logs, "loadtest: ZooKeeper for the service processes at %s\n", servers[0].Addr)
	return servers[0], nil
}

// startNATS starts a standalone nats-server with JetStream under dir for the service processes
// the tool starts: one queue for every instance, as a deployment has. With each process's
// embedded server, an order would travel on the queue of the instance that took it, and only
// that instance could answer its ?wait=.
func startNATS(dir string, logs io.Writer) (*natsserver.Server, error) {
	servers, err := natsserver.New(filepath.Join(dir, "nats"), 1)
	if err != nil {
		return nil, err
	}
	if err := natsserver.StartAll(servers); err != nil {
		return nil, fmt.Errorf("the NATS server of the service processes: %w", err)
	}
	fmt.Fprintf(logs, "loadtest: NATS JetStream for the service processes at %s\n", servers[0].URL)
	return servers[0], nil
}
