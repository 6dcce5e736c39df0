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

// Locks names sku's admission keys and each named lock's backend and key, as the strategies and
// the ledger take them: for whoever reaches into the backends (an operator, -fault lock-loss).
func (s *Service) Locks(sku string) Locks {
	out := Locks{Admission: admission.KeysOf(sku)}
	for _, name := range s.Names() {
		if k, ok := s.strategies[name].(keyed); ok {
			out.Locks = append(out.Locks, LockKey{Strategy: name, Backend: k.LockBackend(), Key: k.LockKey(sku)})
		}
	}
	return out
}
