package backendtest

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/stock"
)

// FaultProxy is a TCP proxy run inside the test (Shopify's toxiproxy as a library) between the
// service and a backend, to cut, slow or reset that connection for real.
type FaultProxy struct {
	*toxiproxy.Proxy
	t testing.TB
}

// StartFaultProxy starts a proxy to upstream on a free loopback port, stopped in t.Cleanup.
func StartFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "fault-"+upstream, "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &FaultProxy{Proxy: p, t: t}
}

// Add adds a toxic, given as toxiproxy's JSON (name, type, stream, toxicity, attributes).
func (p *FaultProxy) Add(toxicJSON string) {
	p.t.Helper()
	_, err := p.Toxics.AddToxicJson(strings.NewReader(toxicJSON))
	require.NoError(p.t, err)
}

// Remove removes the named toxic.
func (p *FaultProxy) Remove(name string) {
	p.t.Helper()
	require.NoError(p.t, p.Toxics.RemoveToxic(context.Background(), name))
}

// StoreVia returns a new Store on the test database whose connections go through addr (a fault
// proxy's Listen address) over network net ("tcp", or a dialer registered with
// mysql.RegisterDialContext), closed in t.Cleanup. It needs the MySQL backend.
func StoreVia(t testing.TB, network, addr string) *stock.Store {
	t.Helper()
	ready(t)
	require.NotEmpty(t, setup.mysqlDSN, "fault tests on the database need MariaDB")
	cfg, err := mysql.ParseDSN(setup.mysqlDSN)
	require.NoError(t, err)
	cfg.Net, cfg.Addr = network, addr
	c := storeConfig()
	c.MySQLDSN = cfg.FormatDSN()
	s, err := app.OpenStore(context.Background(), c, io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// MySQLAddr is the host:port of the test MariaDB ("" on the embedded store).
func MySQLAddr(t testing.TB) string {
	t.Helper()
	ready(t)
	if setup.mysqlDSN == "" {
		return ""
	}
	cfg, err := mysql.ParseDSN(setup.mysqlDSN)
	require.NoError(t, err)
	return cfg.Addr
}
