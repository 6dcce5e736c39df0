package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/flashsale/seckill/internal/stock"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestConfigPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want func(t *testing.T, c *config)
	}{
		{"defaults", nil, nil, func(t *testing.T, c *config) {
			assert.Equal(t, ":8080", c.Addr)
			assert.Equal(t, "hybrid", c.Service.Strategy)
			assert.True(t, c.Service.StrategyOverride)
			assert.False(t, c.Service.AllowUnsafe)
			assert.Equal(t, "./.seckill", c.DataDir)
			assert.Equal(t, 64, c.Service.GroupCommit)
			assert.Equal(t, stock.NoWait, c.Service.RowLock)
			assert.Equal(t, time.Second, c.Service.SoldOutFlag)
			assert.Empty(t, c.PprofAddr)
			assert.True(t, c.tokenGenerated)
			assert.Len(t, c.AdminToken, 32)
		}},
		{"env", map[string]string{"SECKILL_ADDR": ":9", "SECKILL_ALLOW_UNSAFE": "true", "SECKILL_LOCK_WAIT": "3s", "SECKILL_ADMIN_TOKEN": "tok",
			"SECKILL_ROW_LOCK": "wait"}, nil,
			func(t *testing.T, c *config) {
				assert.Equal(t, ":9", c.Addr)
				assert.Equal(t, stock.WaitForRow, c.Service.RowLock)
				assert.True(t, c.Service.AllowUnsafe)
				assert.Equal(t, 3*time.Second, c.Service.LockWait)
				assert.Equal(t, "tok", c.AdminToken)
				assert.False(t, c.tokenGenerated)
			}},
		{"rate limit", map[string]string{"SECKILL_RATE_LIMIT": "50", "SECKILL_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1"}, nil,
			func(t *testing.T, c *config) {
				assert.InDelta(t, 50.0, c.RateLimit, 0)
				assert.Equal(t, 100, c.RateBurst, "the burst defaults to twice the rate")
				assert.Equal(t, []string{"10.0.0.0/8", "192.168.1.1"}, c.TrustedProxies)
			}},
		{"flag wins over env", map[string]string{"SECKILL_STRATEGY": "dblock"}, []string{"-strategy", "naive", "-strategy-override=false"},
			func(t *testing.T, c *config) {
				assert.Equal(t, "naive", c.Service.Strategy)
				assert.False(t, c.Service.StrategyOverride)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(tc.args, env(tc.env))
			require.NoError(t, err)
			tc.want(t, c)
		})
	}
}

func TestConfigRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
	}{
		"bad bool env":       {env: map[string]string{"SECKILL_ALLOW_UNSAFE": "maybe"}},
		"bad duration env":   {env: map[string]string{"SECKILL_LOCK_TTL": "soon"}},
		"zero duration":      {args: []string{"-lock-wait", "0s"}},
		"unknown flag":       {args: []string{"-nope"}},
		"stray argument":     {args: []string{"extra"}},
		"unknown logformat":  {env: map[string]string{"SECKILL_LOG_FORMAT": "xml"}},
		"negative rate":      {args: []string{"-rate-limit", "-1"}},
		"negative batch":     {args: []string{"-group-commit", "-1"}},
		"negative flag ttl":  {args: []string{"-sold-out-flag", "-1s"}},
		"unknown redis mode": {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:6379", "SECKILL_REDIS_MODE": "ring"}},
		"single, two addrs":  {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:6379,127.0.0.1:6380", "SECKILL_REDIS_MODE": "single"}},
		"sentinel, no name":  {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:26379", "SECKILL_REDIS_MODE": "sentinel"}},
		"name, not sentinel": {env: map[string]string{"SECKILL_REDIS_ADDRS": "127.0.0.1:6379", "SECKILL_REDIS_MASTER": "m1"}},
		"mode, embedded":     {env: map[string]string{"SECKILL_REDIS_MODE": "cluster"}},
		"unknown row lock":   {args: []string{"-row-lock", "NOWAIT"}},
		"reservation lease":  {env: map[string]string{"SECKILL_RESERVATION_LEASE": "10s"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadConfig(tc.args, env(tc.env))
			assert.Error(t, err)
		})
	}
	_, err := loadConfig(nil, env(map[string]string{"SECKILL_ROW_LOCK": "skip-locked"}))
	assert.EqualError(t, err, `SECKILL_ROW_LOCK: row lock "skip-locked": want nowait or wait`, "refused at start, saying what it takes")
}

func TestConfigPrintMasksSecrets(t *testing.T) {
	c, err := loadConfig(nil, env(map[string]string{
		"SECKILL_ADMIN_TOKEN": "s3cret-token", "SECKILL_MYSQL_DSN": "root:pw@tcp(db:3306)/seckill",
	}))
	require.NoError(t, err)
	var out bytes.Buffer
	c.print(&out)
	assert.NotContains(t, out.String(), "s3cret-token")
	assert.NotContains(t, out.String(), "pw@tcp")
	assert.Contains(t, out.String(), "SECKILL_MYSQL_DSN")
	assert.Contains(t, out.String(), "SECKILL_STRATEGY_OVERRIDE")
}

// loadCompose loads a compose file as docker compose does, with compose-go: validated against
// the Compose schema and for consistency (depends_on names a service, volumes are declared...),
// with every profile enabled, paths resolved against the repository root, and interpolated from
// no environment at all — the defaults the file states, what a fresh checkout runs.
func loadCompose(t *testing.T, file string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithWorkingDirectory("../.."), cli.WithProfiles([]string{"*"}),
		cli.WithResolvedPaths(true))
	require.NoError(t, err)
	return opts.LoadProject(context.Background())
}

// bindMount returns the host directory or file that svc mounts at target.
func bindMount(t *testing.T, svc types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			assert.True(t, v.ReadOnly, "%s mounts %s writable", svc.Name, target)
			return v.Source
		}
	}
	require.Failf(t, "no bind mount", "%s mounts nothing at %s", svc.Name, target)
	return ""
}

// readYAML decodes a YAML file into out.
func readYAML(t *testing.T, file string, out any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, out), file)
}

// TestComposeFile checks docker-compose.yml, which no engine runs here (README "docker
// compose"): it is a valid Compose file; it has the services the README lists, publishes only
// lb's port and the monitoring UIs' on loopback, health-checks every service that can be; every
// SECKILL_ variable its replicas set is a setting of this command, and every backend a replica
// is pointed at is one it waits for, healthy; Prometheus scrapes each replica at its container
// port with the rules mounted, and Grafana reads that Prometheus and the dashboards mounted.
func TestComposeFile(t *testing.T) {
	project, err := loadCompose(t, "../../docker-compose.yml")
	require.NoError(t, err)
	replicas := []string{"api1", "api2", "api3"}
	assert.ElementsMatch(t, []string{"mysql", "redis", "etcd", "zookeeper", "api1", "api2", "api3", "lb", "loadtest", "prometheus", "grafana"},
		project.ServiceNames())

	published := map[string][]string{}
	for name, svc := range project.Services {
		for _, p := range svc.Ports {
			published[name] = append(published[name], fmt.Sprintf("%s:%s->%d", p.HostIP, p.Published, p.Target))
		}
	}
	assert.Equal(t, map[string][]string{"lb": {":8080->80"}, "prometheus": {"127.0.0.1:9090->9090"}, "grafana": {"127.0.0.1:3000->3000"}},
		published)
	for _, name := range []string{"mysql", "redis", "etcd", "zookeeper", "lb", "prometheus", "grafana"} {
		hc := project.Services[name].HealthCheck
		if assert.NotNil(t, hc, "%s has no healthcheck", name) {
			assert.False(t, hc.Disable, name)
			assert.GreaterOrEqual(t, len(hc.Test), 2, "%s: healthcheck test %v", name, hc.Test)
		}
	}

	c, err := loadConfig(nil, func(string) string { return "" })
	require.NoError(t, err)
	settings := map[string]bool{}
	c.flags.VisitAll(func(f *flag.Flag) { settings[envName(f.Name)] = true })
	backends := map[string]string{"SECKILL_MYSQL_DSN": "mysql", "SECKILL_REDIS_ADDRS": "redis",
		"SECKILL_ETCD_ENDPOINTS": "etcd", "SECKILL_ZK_SERVERS": "zookeeper"}
	var targets []string
	for _, name := range replicas {
		api := project.Services[name]
		for key := range api.Environment {
			assert.True(t, settings[key], "%s sets %s, which is no setting of cmd/api", name, key)
		}
		for key, backend := range backends {
			require.Contains(t, api.Environment, key, "%s is not pointed at %s", name, backend)
			assert.Contains(t, *api.Environment[key], backend, "%s's %s does not name %s", name, key, backend)
			dep, ok := api.DependsOn[backend]
			if assert.True(t, ok, "%s does not wait for %s", name, backend) {
				assert.Equal(t, types.ServiceConditionHealthy, dep.Condition, "%s starts before %s is healthy", name, backend)
			}
		}
		require.NotNil(t, api.Environment["SECKILL_ADDR"])
		_, port, ok := strings.Cut(*api.Environment["SECKILL_ADDR"], ":")
		require.True(t, ok, "%s: SECKILL_ADDR has no port", name)
		assert.Contains(t, api.Expose, port, "%s does not expose the port it listens on", name)
		targets = append(targets, api.Hostname+":"+port)
	}

	prom := project.Services["prometheus"]
	promDir := bindMount(t, prom, "/etc/prometheus")
	assert.Equal(t, absPath(t, "../../deploy/prometheus"), promDir)
	require.Contains(t, prom.Command, "--config.file=/etc/prometheus/prometheus.yml")
	var promCfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(promDir, "prometheus.yml"), &promCfg)
	var scraped []string
	for _, sc := range promCfg.ScrapeConfigs {
		assert.Contains(t, []string{"", "/metrics"}, sc.MetricsPath, sc.JobName)
		for _, st := range sc.StaticConfigs {
			scraped = append(scraped, st.Targets...)
		}
	}
	assert.ElementsMatch(t, targets, scraped, "Prometheus scrapes each replica at the port it listens on, and only them")
	assert.Equal(t, []string{"rules.yml"}, promCfg.RuleFiles, "the rules TestPrometheusRules tests")
	assert.FileExists(t, filepath.Join(promDir, "rules.yml"))
	for _, name := range replicas {
		assert.Contains(t, prom.DependsOn, name)
	}

	grafana := project.Services["grafana"]
	provisioning := bindMount(t, grafana, "/etc/grafana/provisioning")
	var datasources struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(provisioning, "datasources", "prometheus.yml"), &datasources)
	require.Len(t, datasources.Datasources, 1)
	assert.Equal(t, "prometheus", datasources.Datasources[0].Type)
	assert.Equal(t, fmt.Sprintf("http://prometheus:%d", prom.Ports[0].Target), datasources.Datasources[0].URL)
	var providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(provisioning, "dashboards", "seckill.yml"), &providers)
	require.Len(t, providers.Providers, 1)
	dashboards := bindMount(t, grafana, providers.Providers[0].Options.Path)
	assert.Equal(t, absPath(t, dashboardsDir), dashboards, "the dashboards TestDashboardMetrics checks")
	assert.FileExists(t, filepath.Join(dashboards, "seckill.json"))
	assert.Equal(t, filepath.Join(providers.Providers[0].Options.Path, "seckill.json"),
		*grafana.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"], "the home dashboard is the one provisioned")
}

func absPath(t *testing.T, rel string) string {
	t.Helper()
	abs, err := filepath.Abs(rel)
	require.NoError(t, err)
	return abs
}

// TestComposeFileRejected: the loader of TestComposeFile refuses what docker compose would — a
// misspelt depends_on condition, an unknown key, a depends_on naming no service — so that its
// passing means something.
func TestComposeFileRejected(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	for _, tc := range []struct{ name, old, new, want string }{
		{"misspelt condition", "condition: service_healthy", "condition: service_healty", "depends_on.mysql.condition value must be one of"},
		{"unknown key", "stop_grace_period: 20s", "stop_grace_periods: 20s", "stop_grace_periods"},
		{"dependency on no service", "      api3:\n        condition: service_started", "      api4:\n        condition: service_started", "api4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, string(raw), tc.old)
			file := filepath.Join(t.TempDir(), "docker-compose.yml")
			require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(raw), tc.old, tc.new, 1)), 0o600))
			_, err := loadCompose(t, file)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
