package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/backendtest"
	"github.com/flashsale/seckill/internal/orderqueue"
)

const (
	prometheusDir = "prometheus"
	dashboardsDir = "grafana/dashboards"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// promtool returns Prometheus's promtool. Without it the test fails where real tools are
// required (CI: SECKILL_TEST_REQUIRE_BACKENDS=1) and is skipped, saying how to get it, elsewhere.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool is not installed; Debian's prometheus package brings it: apt-get install -y prometheus"
		if backendtest.Required() {
			t.Fatalf("%s (SECKILL_TEST_REQUIRE_BACKENDS=1)", msg)
		}
		t.Skip(msg)
	}
	return path
}

// ruleFiles are the rule files of deploy/prometheus: every YAML file there but the Prometheus
// configuration and the rules' unit tests.
func ruleFiles(t *testing.T) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(prometheusDir, "*.yml"))
	require.NoError(t, err)
	files := slices.DeleteFunc(all, func(f string) bool {
		return filepath.Base(f) == "prometheus.yml" || strings.HasSuffix(f, "_test.yml")
	})
	require.NotEmpty(t, files, "no rule files in %s", prometheusDir)
	return files
}

// ruleGroups is a rule file as Prometheus reads it.
type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T, file string) ruleGroups {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var rg ruleGroups
	require.NoError(t, yaml.Unmarshal(raw, &rg), file)
	return rg
}

// ruleTests is a promtool unit-test file, as far as this test reads it.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromQLExprTest []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// TestPrometheusRules runs promtool on deploy/prometheus: the configuration and the rule files
// it names are valid, every rule file checks, every unit-test file passes — and the unit tests
// cover every alert, both firing and quiet, and every recording rule, so that a rule added
// without a test fails here.
func TestPrometheusRules(t *testing.T) {
	bin := promtool(t)
	tests, err := filepath.Glob(filepath.Join(prometheusDir, "*_test.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, tests, "no rule unit tests (*_test.yml) in %s", prometheusDir)
	runs := [][]string{{"check", "config", "prometheus.yml"}, append([]string{"check", "rules"}, baseNames(ruleFiles(t))...)}
	for _, f := range tests {
		runs = append(runs, []string{"test", "rules", filepath.Base(f)})
	}
	for _, args := range runs {
		cmd := exec.Command(bin, args...)
		cmd.Dir = prometheusDir // rule_files in both files are relative to it
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}

	firing, quiet, checked := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, f := range tests {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var rt ruleTests
		require.NoError(t, yaml.Unmarshal(raw, &rt), f)
		for _, tc := range rt.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
			for _, e := range tc.PromQLExprTest {
				for _, name := range metricNames(e.Expr) {
					checked[name] = true
				}
			}
		}
	}
	// A recording rule is checked when a unit test reads it, or an alert (each tested, below)
	// or a checked recording rule is computed from it.
	uses := map[string][]string{}
	for _, f := range ruleFiles(t) {
		for _, g := range readRules(t, f).Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					assert.True(t, firing[r.Alert], "alert %s has no unit test in which it fires", r.Alert)
					assert.True(t, quiet[r.Alert], "alert %s has no unit test in which it stays quiet", r.Alert)
					for _, name := range metricNames(r.Expr) {
						checked[name] = true
					}
				} else {
					uses[r.Record] = metricNames(r.Expr)
				}
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for record, names := range uses {
			if !checked[record] {
				continue
			}
			for _, name := range names {
				if !checked[name] {
					checked[name], changed = true, true
				}
			}
		}
	}
	for record := range uses {
		assert.True(t, checked[record], "recording rule %s is neither tested nor used by a tested rule", record)
	}
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

var (
	// The parts of a PromQL expression that hold no metric name, removed before names are read:
	// string literals (label values, regexps), label matchers, range and subquery durations, and
	// the label lists of by, without, on, ignoring, group_left and group_right.
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// A token: a number or duration (5m, 0.99, 1e3: a digit first, so "m" of "5m" is no name), or
	// an identifier and whether a call's parenthesis follows it (a function or an aggregation).
	promqlToken = regexp.MustCompile(`\d[\w.]*|([a-zA-Z_:][\w:]*)(\s*\()?`)
	// Words of the language that are not metric names.
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true,
		"ignoring": true, "group_left": true, "group_right": true, "bool": true, "offset": true, "inf": true, "nan": true}
	// Grafana's variable query label_values(expr, label) names the metric in its first argument.
	labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\s*\)\s*$`)
)

// metricNames returns the metric names an expression reads, sorted, each once. Grafana's
// variables ($strategy, $__rate_interval) sit in strings and ranges and go with them.
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	for _, re := range []*regexp.Regexp{promqlString, promqlMatchers, promqlRange, promqlLabels} {
		expr = re.ReplaceAllString(expr, " ")
	}
	seen := map[string]bool{}
	for _, m := range promqlToken.FindAllStringSubmatch(expr, -1) {
		if name := m[1]; name != "" && m[2] == "" && !promqlKeywords[strings.ToLower(name)] {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`sum by (strategy, outcome) (rate(seckill_orders_total{strategy=~"$strategy",outcome!="ok"}[$__rate_interval]))`,
			[]string{"seckill_orders_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(seckill_lock_wait_seconds_bucket[5m:1m])))`, []string{"seckill_lock_wait_seconds_bucket"}},
		{`(increase(a_total[5m]) and a_total offset 5m) or (a_total and on (job, instance) (up offset 5m == 1))`, []string{"a_total", "up"}},
		{`x / ignoring(le) group_left sum without (instance) (y) > bool 0`, []string{"x", "y"}},
		{`job:seckill_http_requests_5xx:ratio_rate5m > 0.01`, []string{"job:seckill_http_requests_5xx:ratio_rate5m"}},
		{`label_values(seckill_orders_total{job="seckill"}, strategy)`, []string{"seckill_orders_total"}},
		{`sum(rate(seckill_sold_out_flag_rejections_totl[1m])) or vector(0)`, []string{"seckill_sold_out_flag_rejections_totl"}},
		{`count_values("version", go_info{label="a{b}"})`, []string{"go_info"}},
	} {
		assert.Equal(t, tc.want, metricNames(tc.expr), tc.expr)
	}
}

// unknownMetrics returns, for each name that exprs read and known does not hold, the
// expressions that read it.
func unknownMetrics(exprs map[string][]string, known func(string) bool) map[string][]string {
	out := map[string][]string{}
	for where, list := range exprs {
		for _, e := range list {
			for _, name := range metricNames(e) {
				if !known(name) {
					out[name] = append(out[name], where+": "+e)
				}
			}
		}
	}
	return out
}

func TestUnknownMetrics(t *testing.T) {
	known := func(n string) bool { return n == "seckill_orders_total" || n == "up" }
	exprs := map[string][]string{"dashboard": {`sum(rate(seckill_orders_total[1m]))`, `sum(rate(seckill_order_total[1m]))`}, "rules": {`up == 0`}}
	assert.Equal(t, map[string][]string{"seckill_order_total": {"dashboard: sum(rate(seckill_order_total[1m]))"}},
		unknownMetrics(exprs, known), "a misspelt name is reported, with where it is read")
}

// dashboardPanel is a Grafana panel, or a row holding panels.
type dashboardPanel struct {
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource map[string]any   `json:"datasource"`
	GridPos    map[string]int   `json:"gridPos"`
	Panels     []dashboardPanel `json:"panels"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// dashboard is a Grafana dashboard JSON, as far as this test reads it.
type dashboard struct {
	UID        string           `json:"uid"`
	Title      string           `json:"title"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or {"query": ...}
		} `json:"list"`
	} `json:"templating"`
}

// dashboardExprs reads every dashboard of deploy/grafana/dashboards — each must parse, and each
// panel have a title, a place and queries — and returns their expressions by dashboard file.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no dashboards in %s", dashboardsDir)
	out := map[string][]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var d dashboard
		require.NoError(t, json.Unmarshal(raw, &d), "%s does not parse", f)
		require.NotEmpty(t, d.UID, f)
		require.NotEmpty(t, d.Title, f)
		require.NotEmpty(t, d.Panels, f)
		var walk func(panels []dashboardPanel)
		walk = func(panels []dashboardPanel) {
			for _, p := range panels {
				assert.NotEmpty(t, p.Title, "%s: a panel without a title", f)
				assert.Contains(t, p.GridPos, "h", "%s: panel %q has no place", f, p.Title)
				if p.Type == "row" {
					walk(p.Panels)
					continue
				}
				assert.NotEmpty(t, p.Datasource, "%s: panel %q has no datasource", f, p.Title)
				assert.NotEmpty(t, p.Targets, "%s: panel %q has no query", f, p.Title)
				for _, q := range p.Targets {
					assert.NotEmpty(t, q.Expr, "%s: panel %q query %s is empty", f, p.Title, q.RefID)
					out[f] = append(out[f], q.Expr)
				}
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			switch q := v.Query.(type) {
			case string:
				if v.Type == "query" {
					out[f] = append(out[f], q)
				}
			case map[string]any:
				if s, ok := q["query"].(string); ok {
					out[f] = append(out[f], s)
				}
			}
		}
	}
	return out
}

// scrapeSale starts an instance with cmd/api's defaults — every backend embedded, as the README's
// first command runs — and sells out one product under every strategy it offers, over HTTP, so that every labelled
// vector a sale fills has a sample; it returns the names /metrics then exposes, as the series
// names PromQL reads (a histogram's _bucket, _sum and _count). The queued strategy's backlog
// gauges have a sample only while an order waits, which a sale's writers end within
// milliseconds: its sale is made with the writers paused and scraped then, before they resume.
func scrapeSale(t *testing.T) map[string]bool {
	t.Helper()
	dataDir := t.TempDir()
	cfg := app.Defaults()
	cfg.DataDir, cfg.AdminToken = dataDir, "tok"
	// Offer the unsafe strategies too: they are strategies users can run.
	cfg.Service.AllowUnsafe = true
	// Every lock hold counts as too long, so that seckill_lock_held_too_long_total has a
	// sample: a hold past the default 500ms does not happen in a small sale.
	cfg.Service.SlowHold = time.Microsecond
	svc := startService(t, cfg)
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	require.Equal(t, http.StatusBadRequest, svc.call(t, "POST", "/api/v1/products/probe/orders", `{"user_id":"u","strategy":"no-such"}`, &e))
	m := regexp.MustCompile(`known: \[([^\]]*)\]`).FindStringSubmatch(e.Error.Message)
	require.NotNil(t, m, "the answer to an unknown strategy lists the known ones: %q", e.Error.Message)
	strategies := strings.Fields(m[1])
	require.Contains(t, strategies, "hybrid")
	require.Contains(t, strategies, "queued")
	names := map[string]bool{}
	for _, strategy := range strategies {
		sku := "metrics-" + strategy
		require.Equal(t, http.StatusOK, svc.call(t, "PUT", "/api/v1/products/"+sku, `{"name":"metrics","stock":4}`, nil))
		accepted, resume := http.StatusCreated, func() {}
		if strategy == "queued" {
			accepted, resume = http.StatusAccepted, pauseWriters(t, dataDir)
		}
		// Buyers at once, as in a sale: locks are waited for, sections batch orders.
		var wg sync.WaitGroup
		statuses := make([]int, 8) // 0: no answer
		ids := make([]string, len(statuses))
		for i := range statuses {
			wg.Go(func() {
				body := fmt.Sprintf(`{"user_id":"u%d","strategy":%q}`, i, strategy)
				resp, err := http.Post(svc.url+"/api/v1/products/"+sku+"/orders", "application/json", strings.NewReader(body))
				if err == nil {
					statuses[i] = resp.StatusCode
					raw, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode >= 500 {
						t.Errorf("%s: u%d answered %d: %s", strategy, i, resp.StatusCode, raw)
					}
					var o struct {
						OrderID string `json:"order_id"`
					}
					_ = json.Unmarshal(raw, &o)
					ids[i] = o.OrderID
				}
			})
		}
		wg.Wait()
		assert.NotContains(t, statuses, 0, "%s: a request got no answer", strategy)
		assert.Contains(t, statuses, accepted, strategy)
		if strategy == "queued" {
			families := scrapeFamilies(t, svc.url)
			depth := map[string]float64{}
			for _, m := range families["seckill_queue_depth"].GetMetric() {
				depth[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
			// The 202s wait in the queue, in batches (group commit): as many as went out while a
			// publish was in flight, so one batch for all four or one each.
			require.Contains(t, depth, sku, "the writers paused, the 202s wait in the queue")
			assert.Len(t, depth, 1)
			assert.GreaterOrEqual(t, depth[sku], 1.0, "the writers paused, the 202s wait in the queue")
			assert.LessOrEqual(t, depth[sku], 4.0, "no more batches than accepted orders")
			assert.Len(t, families["seckill_queue_oldest_age_seconds"].GetMetric(), 1)
			maps.Copy(names, seriesNames(families))
			resume()
			// Every 202 ends: the writers, resumed, place the accepted orders.
			for i, id := range ids {
				if statuses[i] != http.StatusAccepted {
					continue
				}
				var o struct {
					Status string `json:"status"`
				}
				require.Equal(t, http.StatusOK, svc.call(t, "GET", "/api/v1/orders/"+id+"?wait=5s", "", &o))
				assert.Contains(t, []string{"pending", "confirmed"}, o.Status, "queued order %s did not end placed", id)
			}
		}
		// Then until sold out (an unsafe strategy may have sold more than there was).
		for i := len(statuses); !slices.Contains(statuses, http.StatusConflict) && i < 40; i++ {
			var answer map[string]any
			status := svc.call(t, "POST", "/api/v1/products/"+sku+"/orders", fmt.Sprintf(`{"user_id":"u%d","strategy":%q}`, i, strategy), &answer)
			if status >= 500 {
				t.Errorf("%s: u%d answered %d: %v", strategy, i, status, answer)
			}
			statuses = append(statuses, status)
		}
		assert.Contains(t, statuses, http.StatusConflict, "%s: the product never sold out", strategy)
	}

	// An order's life — paid, then cancelled — fills the transitions and the relay's restock.
	var o struct {
		OrderID string `json:"order_id"`
	}
	require.Equal(t, http.StatusOK, svc.call(t, "PUT", "/api/v1/products/metrics-lifecycle", `{"name":"metrics","stock":1,"payment_timeout_s":60}`, nil))
	require.Equal(t, http.StatusCreated, svc.call(t, "POST", "/api/v1/products/metrics-lifecycle/orders", `{"user_id":"payer"}`, &o))
	require.Equal(t, http.StatusOK, svc.call(t, "POST", "/api/v1/orders/"+o.OrderID+"/pay", `{"user_id":"payer"}`, nil))
	require.Equal(t, http.StatusOK, svc.call(t, "POST", "/api/v1/orders/"+o.OrderID+"/cancel", `{"user_id":"payer"}`, nil))

	maps.Copy(names, seriesNames(scrapeFamilies(t, svc.url)))
	return names
}

// service is an instance serving in this process.
type service struct{ url, token string }

// startService opens an instance of cfg with app.Open and serves it on a loopback port, as
// cmd/api's run does, until the test ends.
func startService(t *testing.T, cfg app.Config) service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Open(ctx, cfg, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		_ = a.Close()
		require.NoError(t, err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-served)
		assert.NoError(t, a.Close())
	})
	return service{url: "http://" + ln.Addr().String(), token: cfg.AdminToken}
}

// call sends one JSON request with the admin token (backendtest.Call).
func (s service) call(t *testing.T, method, path, body string, out any) int {
	return backendtest.Call(t, s.url, s.token, method, path, body, out)
}

// pauseWriters pauses the queued strategy's writers — the durable consumer that every
// instance's writers share, on the embedded NATS server of dataDir — so that accepted orders
// wait in the queue; the function it returns resumes them.
func pauseWriters(t *testing.T, dataDir string) func() {
	t.Helper()
	url, err := os.ReadFile(filepath.Join(dataDir, "nats", "ADDRESS"))
	require.NoError(t, err, "the embedded NATS server writes its address beside its store")
	nc, err := nats.Connect(strings.TrimSpace(string(url)))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = js.PauseConsumer(ctx, orderqueue.DefaultStream, orderqueue.DefaultConsumer, time.Now().Add(time.Minute))
	require.NoError(t, err)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.ResumeConsumer(ctx, orderqueue.DefaultStream, orderqueue.DefaultConsumer)
		require.NoError(t, err)
	}
}

// scrapeFamilies reads the service's /metrics once.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// seriesNames are the names of the families' series as PromQL reads them.
func seriesNames(families map[string]*dto.MetricFamily) map[string]bool {
	names := map[string]bool{}
	for name, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// describedNames is a prometheus.Registerer that records the name of every family the
// collectors registered through it describe, whether or not a sample of it exists yet.
type describedNames struct {
	prometheus.Registerer
	names map[string]bool
}

// descName reads a Desc's name from its String(), the one place client_golang shows it.
var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

func (d *describedNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		if m := descName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return d.Registerer.Register(c)
}

func (d *describedNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// registeredNames builds an instance with app.Open, as run does, and returns the names of the
// families it registers.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := &describedNames{names: map[string]bool{}}
	a, err := app.Open(context.Background(), backendtest.AppConfig(t), slog.New(slog.DiscardHandler), io.Discard,
		app.WrapRegisterer(func(r prometheus.Registerer) prometheus.Registerer { reg.Registerer = r; return reg }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.Contains(t, reg.names, "seckill_orders_total", "the families' names are read from Desc.String(): has its format changed?")
	return reg.names
}

// prometheusMade are series that Prometheus itself writes, not the service: up for every
// target, ALERTS for the rules' alerts.
var prometheusMade = map[string]bool{"up": true, "ALERTS": true}

// TestDashboardMetrics: every metric name that the dashboard and the rules read is one the
// service really exposes, or a recording rule of the rules, or one Prometheus makes. The names
// come from a real scrape after a sale under every strategy. A few families get their first
// sample only from a rare event — a lost lock, a fenced write, a Redis fallback, a sweep, an
// optimistic retry, a watchdog extension — which no small sale produces; for those, and only
// when the scrape does not have them, the names the service registers are taken instead (and
// logged), so that a misspelt name still fails.
func TestDashboardMetrics(t *testing.T) {
	exprs := dashboardExprs(t)
	recorded := map[string]bool{}
	for _, f := range ruleFiles(t) {
		for _, g := range readRules(t, f).Groups {
			for _, r := range g.Rules {
				exprs[f] = append(exprs[f], r.Expr)
				if r.Record != "" {
					recorded[r.Record] = true
				}
			}
		}
	}
	scraped := scrapeSale(t)
	for _, name := range []string{"seckill_orders_total", "seckill_lock_hold_seconds_bucket", "seckill_batch_orders_count",
		"seckill_lock_held_too_long_total", "seckill_admission_stranded_units", "go_sql_in_use_connections",
		"seckill_queue_orders_total", "seckill_queue_depth", "seckill_queue_oldest_age_seconds"} {
		require.True(t, scraped[name], "the scrape after a sale has no %s", name)
	}
	registered := registeredNames(t)
	var fromRegistry []string
	unknown := unknownMetrics(exprs, func(name string) bool {
		if scraped[name] || recorded[name] || prometheusMade[name] {
			return true
		}
		if registered[name] {
			fromRegistry = append(fromRegistry, name)
			return true
		}
		return false
	})
	for name, where := range unknown {
		sort.Strings(where)
		assert.Fail(t, "unknown metric "+name, "neither exposed by the service nor recorded by the rules, read by:\n  %s",
			strings.Join(where, "\n  "))
	}
	slices.Sort(fromRegistry)
	t.Logf("names taken from the registered families, no sale having filled them: %v", slices.Compact(fromRegistry))
}
