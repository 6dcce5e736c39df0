package deploy

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// loadCompose loads a compose file as docker compose does, with compose-go: validated against
// the Compose schema and for consistency (depends_on names a service, volumes are declared...),
// with every profile enabled, paths resolved against the repository root, and interpolated from
// no environment at all — the defaults the file states, what a fresh checkout runs.
func loadCompose(t *testing.T, file string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithWorkingDirectory(".."), cli.WithProfiles([]string{"*"}),
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
// SECKILL_ variable its replicas set is a setting of cmd/api, and every backend a replica
// is pointed at is one it waits for, healthy — the order queue too: one NATS server for every
// replica, at the version the service embeds, with JetStream syncing every write to a volume;
// Prometheus scrapes each replica at its container port with the rules mounted, and Grafana reads
// that Prometheus and the dashboards mounted.
func TestComposeFile(t *testing.T) {
	project, err := loadCompose(t, "../docker-compose.yml")
	require.NoError(t, err)
	replicas := []string{"api1", "api2", "api3"}
	assert.ElementsMatch(t, []string{"mariadb", "redis", "etcd", "zookeeper", "nats", "api1", "api2", "api3", "lb", "loadtest", "prometheus", "grafana"},
		project.ServiceNames())

	published := map[string][]string{}
	for name, svc := range project.Services {
		for _, p := range svc.Ports {
			published[name] = append(published[name], fmt.Sprintf("%s:%s->%d", p.HostIP, p.Published, p.Target))
		}
	}
	assert.Equal(t, map[string][]string{"lb": {":8080->80"}, "prometheus": {"127.0.0.1:9090->9090"}, "grafana": {"127.0.0.1:3000->3000"}},
		published)
	for _, name := range []string{"mariadb", "redis", "etcd", "zookeeper", "nats", "lb", "prometheus", "grafana"} {
		hc := project.Services[name].HealthCheck
		if assert.NotNil(t, hc, "%s has no healthcheck", name) {
			assert.False(t, hc.Disable, name)
			assert.GreaterOrEqual(t, len(hc.Test), 2, "%s: healthcheck test %v", name, hc.Test)
		}
	}

	settings := apiSettings(t)
	backends := map[string]string{"SECKILL_MYSQL_DSN": "mariadb", "SECKILL_REDIS_ADDRS": "redis",
		"SECKILL_ETCD_ENDPOINTS": "etcd", "SECKILL_ZK_SERVERS": "zookeeper", "SECKILL_NATS_URLS": "nats"}
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

	// One queue for every replica, at the version the service embeds, with JetStream on a volume
	// and syncing every write, as the embedded server does.
	nats := project.Services["nats"]
	assert.Equal(t, "nats:"+strings.TrimPrefix(moduleVersion(t, "github.com/nats-io/nats-server/v2"), "v")+"-alpine", nats.Image,
		"the queue's server is not the version the service embeds (go.mod)")
	assert.Contains(t, nats.Command, "-js")
	natsConf := bindMount(t, nats, "/etc/nats/seckill.conf")
	assert.Equal(t, absPath(t, "nats.conf"), natsConf)
	assert.Contains(t, []string(nats.Command), "/etc/nats/seckill.conf", "nats runs without its config")
	raw, err := os.ReadFile(natsConf)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^\s*sync_interval:\s*always\s*$`, string(raw), "a single server must sync every write before it acknowledges it")
	assert.Regexp(t, `(?m)^\s*store_dir:\s*/data\s*$`, string(raw))
	storeVolume := false
	for _, v := range nats.Volumes {
		storeVolume = storeVolume || (v.Type == types.VolumeTypeVolume && v.Target == "/data")
	}
	assert.True(t, storeVolume, "the queue's store is not on a volume: queued orders would not survive a restart")

	prom := project.Services["prometheus"]
	promDir := bindMount(t, prom, "/etc/prometheus")
	assert.Equal(t, absPath(t, prometheusDir), promDir)
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

// moduleVersion is the version go.mod requires of module.
func moduleVersion(t *testing.T, module string) string {
	t.Helper()
	raw, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	require.Failf(t, "no such module", "go.mod does not require %s", module)
	return ""
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
	raw, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	for _, tc := range []struct{ name, old, new, want string }{
		{"misspelt condition", "condition: service_healthy", "condition: service_healty", "depends_on.mariadb.condition value must be one of"},
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

// apiConfig is the source of cmd/api's settings: loadConfig defines every flag on fs.
const apiConfig = "../cmd/api/config.go"

// flagDefiners are the methods of flag.FlagSet that define a flag, its name their first string.
var flagDefiners = map[string]bool{"Bool": true, "BoolVar": true, "BoolFunc": true, "Duration": true, "DurationVar": true,
	"Float64": true, "Float64Var": true, "Func": true, "Int": true, "IntVar": true, "Int64": true, "Int64Var": true,
	"String": true, "StringVar": true, "TextVar": true, "Uint": true, "UintVar": true, "Uint64": true, "Uint64Var": true, "Var": true}

// apiSettings are the variables cmd/api reads, read from its source: each flag loadConfig
// defines, named as cmd/api reads it from the environment (addr -> SECKILL_ADDR).
func apiSettings(t *testing.T) map[string]bool {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), apiConfig, nil, 0)
	require.NoError(t, err)
	settings := map[string]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !flagDefiners[sel.Sel.Name] {
			return true
		}
		if recv, ok := sel.X.(*ast.Ident); !ok || recv.Name != "fs" {
			return true
		}
		for _, a := range call.Args[:min(2, len(call.Args))] {
			if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				settings["SECKILL_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))] = true
				break
			}
		}
		return true
	})
	require.Contains(t, settings, "SECKILL_ADDR", "no flag definitions found on fs in %s: has loadConfig changed?", apiConfig)
	return settings
}
