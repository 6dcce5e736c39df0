// Package embeddedetcd is the service's embedded default etcd: one real etcd member inside the
// process (package etcdserver), used when no etcd cluster is configured.
package embeddedetcd

import (
	"os"

	"github.com/flashsale/seckill/devserver/etcdserver"
)

// Start starts the member with its data in dir, removed first: the peer port changes from run
// to run, so the old data would name a cluster that no longer exists, and lock state need not
// survive a restart.
func Start(dir string) (*etcdserver.Member, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	return etcdserver.Start(dir)
}
