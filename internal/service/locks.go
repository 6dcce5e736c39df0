package service

import (
	"github.com/flashsale/seckill/internal/admission"
)

// Locks names where an instance's strategies lock one product, and the product's admission keys.
type Locks struct {
	Locks     []LockKey // by strategy name
	Admission admission.Keys
}

// LockKey is where one strategy locks a product: in which backend, under which key.
type LockKey struct {
	Strategy string
	Backend  string // redis, etcd, zookeeper or database
	Key      string
}

// keyed is a strategy that locks a product under a name of its own, in a lock service
// (lockstrategy.Locked and Hybrid: their Locker's).
type keyed interface {
	LockKey(sku string) string
	LockBackend() string
}

// Locks names, for every strategy this instance offers that takes a named lock, that lock's
// backend and key for sku, and sku's admission keys. The names come from the strategies and the
// ledger themselves, so that whoever reaches into the backends — an operator after a failover,
// the load tool's -fault lock-loss — finds what the code takes, not a copy of its layout.
func (s *Service) Locks(sku string) Locks {
	out := Locks{Admission: admission.KeysOf(sku)}
	for _, name := range s.Names() {
		st := s.strategies[name]
		k, ok := st.(keyed)
		if !ok {
			continue
		}
		out.Locks = append(out.Locks, LockKey{Strategy: name, Backend: k.LockBackend(), Key: k.LockKey(sku)})
	}
	return out
}
