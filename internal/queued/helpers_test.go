package queued_test

import (
	"testing"

	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/service"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// instances is how many instances a sale across instances runs on.
const instances = 3

// config is the default configuration (what cmd/api runs) with the default strategy set to
// strategy.
func config(strategy string) service.Config {
	cfg := service.Defaults()
	cfg.Strategy = strategy
	return cfg
}

// newInstances builds n independent instances of cfg (each its own store, pools and clients) on
// the wiring w.
func newInstances(t *testing.T, n int, cfg service.Config, w backendtest.Wiring) []backendtest.Instance {
	t.Helper()
	var insts []backendtest.Instance
	for range n {
		insts = append(insts, backendtest.NewInstance(t, cfg, w))
	}
	return insts
}
