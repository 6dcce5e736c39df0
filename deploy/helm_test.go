package deploy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/handler"
	seckillservice "github.com/flashsale/seckill/internal/service"
)

const (
	chartDir = "helm/seckill"
	// chartKube is the oldest Kubernetes the chart supports (Chart.yaml's kubeVersion): it is
	// rendered and linted as for that cluster.
	chartKube = "v1.30.0"
)

// chartValues are the values sets the tests render: the chart's ci/*-values.yaml, each a
// deployment as a team would set it, by name (ci/sentinel-values.yaml: "sentinel").
func chartValues(t *testing.T, dir string) map[string]common.Values {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "ci", "*-values.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no values sets in %s/ci", dir)
	sets := map[string]common.Values{}
	for _, f := range files {
		vals, err := common.ReadValuesFile(f)
		require.NoError(t, err)
		sets[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = vals
	}
	return sets
}

// renderChart renders the chart in dir with vals as `helm template` does: Helm's install action,
// client-side dry run, no cluster. It returns the manifests in the order Helm installs them.
func renderChart(dir string, vals map[string]any) ([]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	kube, err := common.ParseKubeVersion(chartKube)
	if err != nil {
		return nil, err
	}
	cfg := action.NewConfiguration()
	cfg.SetLogger(slog.DiscardHandler) // it says, at Info, that it followed the links in files/
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.KubeVersion = "seckill", "sale", kube
	rel, err := install.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("release of type %T", rel)
	}
	split := releaseutil.SplitManifests(r.Manifest)
	keys := slices.Collect(maps.Keys(split))
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	manifests := make([]string, len(keys))
	for i, k := range keys {
		manifests[i] = split[k]
	}
	return manifests, nil
}

// lintChart runs Helm's lint action, strict (a warning fails), on the chart in dir with vals.
func lintChart(dir string, vals map[string]any) []string {
	kube, err := common.ParseKubeVersion(chartKube)
	if err != nil {
		return []string{err.Error()}
	}
	lint := action.NewLint()
	lint.Strict, lint.Namespace, lint.KubeVersion = true, "sale", kube
	var problems []string
	for _, err := range lint.Run([]string{dir}, vals).Errors {
		problems = append(problems, "lint: "+err.Error())
	}
	return problems
}

// serviceMonitor and prometheusRule are the Prometheus Operator's objects, as far as the chart
// writes them: a field the chart sets that is not here fails their strict decoding.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

// ruleGroup is a group of rules, in a rule file as in a PrometheusRule.
type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []struct {
		Record      string            `json:"record,omitempty"`
		Alert       string            `json:"alert,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

// chartObjects are the objects of one render, decoded.
type chartObjects struct {
	deployment  *appsv1.Deployment
	service     *corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdb         *policyv1.PodDisruptionBudget
	hpa         *autoscalingv2.HorizontalPodAutoscaler
	monitor     *serviceMonitor
	rule        *prometheusRule
	kinds       []string // "Kind/name" of each object, in order
	decodeFails []string
}

// strict decodes Kubernetes' own kinds into their k8s.io/api types, failing on an unknown or
// duplicate field: a field misspelt or put at the wrong level, which the API server would drop
// or refuse.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// decodeChart decodes each manifest strictly; one that does not decode is a problem.
func decodeChart(manifests []string) chartObjects {
	objs := chartObjects{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, m := range manifests {
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct{ Name string } `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(m), &head); err != nil {
			objs.decodeFails = append(objs.decodeFails, fmt.Sprintf("a manifest does not parse: %v", err))
			continue
		}
		id := head.Kind + "/" + head.Metadata.Name
		objs.kinds = append(objs.kinds, id)
		if head.GroupVersionKind().Group == "monitoring.coreos.com" {
			var err error
			switch head.Kind {
			case "ServiceMonitor":
				objs.monitor = &serviceMonitor{}
				err = yaml.UnmarshalStrict([]byte(m), objs.monitor)
			case "PrometheusRule":
				objs.rule = &prometheusRule{}
				err = yaml.UnmarshalStrict([]byte(m), objs.rule)
			default:
				err = errors.New("a kind the tests do not know")
			}
			if err != nil {
				objs.decodeFails = append(objs.decodeFails, fmt.Sprintf("%s: %v", id, err))
			}
			continue
		}
		obj, _, err := strict.Decode([]byte(m), nil, nil)
		if err != nil {
			objs.decodeFails = append(objs.decodeFails, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			objs.deployment = o
		case *corev1.Service:
			objs.service = o
		case *corev1.ConfigMap:
			objs.configMaps[o.Name] = o
		case *corev1.Secret:
			objs.secrets[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			objs.pdb = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			objs.hpa = o
		default:
			objs.decodeFails = append(objs.decodeFails, fmt.Sprintf("%s: a kind the tests do not check (%T)", id, obj))
		}
	}
	return objs
}

// probeSales is a service whose backends are all up, or all down; the probe routes ask it
// nothing else.
type probeSales struct {
	handler.Sales // nil: the probe routes call nothing else
	down          bool
}

func (s probeSales) Checks() []seckillservice.Check {
	return []seckillservice.Check{{Name: "database", Ping: func(context.Context) error {
		if s.down {
			return errors.New("connection refused")
		}
		return nil
	}}}
}

// served is the status the service's own router answers a GET of path with, its backends up
// or down.
func served(path string, down bool) int {
	reg := prometheus.NewRegistry()
	h, err := handler.New(handler.Config{Sales: probeSales{down: down}, AdminToken: "t",
		Log: slog.New(slog.DiscardHandler), Registerer: reg, Gatherer: reg})
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// envOf is every variable the container gets, and its value; a reference to an object the chart
// does not render is a problem, unless it is the user's own Secret (external), unread here.
func envOf(objs chartObjects, c corev1.Container, external string) (map[string]string, []string) {
	env, problems := map[string]string{}, []string(nil)
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := objs.configMaps[from.ConfigMapRef.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("envFrom names ConfigMap %s, which the chart does not render", from.ConfigMapRef.Name))
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := objs.secrets[from.SecretRef.Name]
			if !ok {
				if from.SecretRef.Name != external {
					problems = append(problems, fmt.Sprintf("envFrom names Secret %s, which the chart does not render", from.SecretRef.Name))
				}
				continue
			}
			for k, v := range s.StringData {
				env[from.Prefix+k] = v
			}
			for k, v := range s.Data {
				env[from.Prefix+k] = string(v)
			}
		}
	}
	return env, problems
}

// promConfig is what the rules assume of the Prometheus that evaluates them: compose's
// prometheus.yml, its intervals and the job the replicas are scraped as.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	ScrapeConfigs []struct {
		JobName string `json:"job_name"`
	} `json:"scrape_configs"`
}

// chartChecks holds what the rendered objects are checked against: the service's settings,
// ports and drain, the rules promtool tests and the dashboard.
type chartChecks struct {
	settings  map[string]bool
	prom      promConfig
	rules     []ruleGroup
	dashboard string
}

func loadChartChecks(t *testing.T) chartChecks {
	t.Helper()
	c := chartChecks{settings: apiSettings(t)}
	raw, err := os.ReadFile(filepath.Join(prometheusDir, "prometheus.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &c.prom))
	require.Len(t, c.prom.ScrapeConfigs, 1)
	raw, err = os.ReadFile(filepath.Join(prometheusDir, "rules.yml"))
	require.NoError(t, err)
	var file struct {
		Groups []ruleGroup `json:"groups"`
	}
	require.NoError(t, yaml.UnmarshalStrict(raw, &file), "rules.yml holds a field ruleGroup lacks: add it, so that it is compared")
	require.NotEmpty(t, file.Groups)
	c.rules = file.Groups
	raw, err = os.ReadFile(filepath.Join(dashboardsDir, "seckill.json"))
	require.NoError(t, err)
	c.dashboard = string(raw)
	return c
}

// renderProblems checks one render made with vals against the service: every object decodes
// strictly; every variable the container gets is a setting of cmd/api and every backend is set;
// the probes ask the service's own routes what they are for, on the port it listens on; the
// grace period covers the preStop sleep and the drain; the data dir is the one writable place;
// the Service, the PDB, the HPA and the ServiceMonitor find the pods; the PrometheusRule holds
// the rules promtool tests, the dashboard ConfigMap the dashboard.
func (c chartChecks) renderProblems(objs chartObjects, vals common.Values) []string {
	problems := slices.Clone(objs.decodeFails)
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d := objs.deployment
	if d == nil {
		return append(problems, "no Deployment")
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return append(problems, fmt.Sprintf("the pod has %d containers, not the service's one", len(pod.Containers)))
	}
	ct := pod.Containers[0]
	external, _ := vals.PathValue("secret.existingSecret")
	externalName, _ := external.(string)

	env, envProblems := envOf(objs, ct, externalName)
	problems = append(problems, envProblems...)
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if !c.settings[name] {
			add("the chart sets %s, which is no setting of cmd/api", name)
		}
	}
	inUserSecret := externalName != ""
	for _, name := range []string{"SECKILL_MYSQL_DSN", "SECKILL_REDIS_ADDRS", "SECKILL_ETCD_ENDPOINTS", "SECKILL_NATS_URLS", "SECKILL_ADMIN_TOKEN"} {
		secret := name == "SECKILL_MYSQL_DSN" || name == "SECKILL_ADMIN_TOKEN"
		if env[name] == "" && !(secret && inUserSecret) {
			add("%s is empty: each replica would embed a backend of its own, or make up its own token", name)
		}
	}

	// The port: the one SECKILL_ADDR listens on, the container's, the probes' and the Service's.
	addr := app.Defaults().Addr
	if a, ok := env["SECKILL_ADDR"]; ok {
		addr = a
	}
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		add("SECKILL_ADDR %q: %v", addr, err)
	}
	ports := map[string]int32{}
	listened := false
	for _, p := range ct.Ports {
		ports[p.Name] = p.ContainerPort
		listened = listened || fmt.Sprint(p.ContainerPort) == portText
		if fmt.Sprint(p.ContainerPort) != portText {
			add("container port %s (%d) is not the one the service listens on (SECKILL_ADDR %s)", p.Name, p.ContainerPort, addr)
		}
	}
	if !listened {
		add("no container port is the one the service listens on (SECKILL_ADDR %s)", addr)
	}
	resolves := func(what string, port intstr.IntOrString) {
		if port.Type == intstr.String {
			if _, ok := ports[port.StrVal]; !ok {
				add("%s names port %q, which the container does not have", what, port.StrVal)
			}
			return
		}
		if fmt.Sprint(port.IntVal) != portText {
			add("%s is on port %d, not the one the service listens on (SECKILL_ADDR %s)", what, port.IntVal, addr)
		}
	}

	// The probes, asked of the service's own router.
	probe := func(name string, p *corev1.Probe) (string, bool) {
		if p == nil || p.HTTPGet == nil {
			add("no %s probe over HTTP", name)
			return "", false
		}
		resolves(name+" probe", p.HTTPGet.Port)
		if got := served(p.HTTPGet.Path, false); got != http.StatusOK {
			add("%s probe on %s: the service answers it %d", name, p.HTTPGet.Path, got)
			return p.HTTPGet.Path, false
		}
		return p.HTTPGet.Path, true
	}
	if path, ok := probe("readiness", ct.ReadinessProbe); ok && served(path, true) == http.StatusOK {
		add("readiness probe on %s stays 200 with a backend down: the replica keeps getting orders it cannot place", path)
	}
	if path, ok := probe("liveness", ct.LivenessProbe); ok && served(path, true) != http.StatusOK {
		add("liveness probe on %s fails with a backend down: a backend's blip would restart every replica", path)
	}
	probe("startup", ct.StartupProbe)

	// The drain: SIGTERM comes after the preStop sleep, and the service answers what is in flight
	// within its shutdown timeout; the grace period must hold both, and leave time to close.
	drain := app.Defaults().ShutdownTimeout
	if s, ok := env["SECKILL_SHUTDOWN_TIMEOUT"]; ok {
		if drain, err = time.ParseDuration(s); err != nil {
			add("SECKILL_SHUTDOWN_TIMEOUT %q: %v", s, err)
		}
	}
	var preStop time.Duration
	if ct.Lifecycle == nil || ct.Lifecycle.PreStop == nil || ct.Lifecycle.PreStop.Sleep == nil {
		add("no preStop sleep: SIGTERM can come before the proxies stop sending the pod new requests")
	} else {
		preStop = time.Duration(ct.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	grace := 30 * time.Second // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if grace <= preStop+drain {
		add("terminationGracePeriodSeconds %s does not cover the preStop sleep (%s) and the drain (SECKILL_SHUTDOWN_TIMEOUT %s) with time to close: answered orders are cut off",
			grace, preStop, drain)
	}

	// Non-root, read-only root, the data dir on an emptyDir.
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		add("the pod may run as root")
	}
	if sc := ct.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		add("the root filesystem is writable")
	}
	dataDir := app.Defaults().DataDir
	if v, ok := env["SECKILL_DATA_DIR"]; ok {
		dataDir = v
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		emptyDirs[v.Name] = v.EmptyDir != nil
	}
	mounted := false
	for _, m := range ct.VolumeMounts {
		mounted = mounted || m.MountPath == dataDir && emptyDirs[m.Name] && !m.ReadOnly
	}
	if !mounted {
		add("the data dir %s is not a writable emptyDir", dataDir)
	}

	// What finds the pods.
	podLabels := labels.Set(d.Spec.Template.Labels)
	selects := func(what string, sel *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			add("%s does not select the pods", what)
		}
	}
	selects("the Deployment", d.Spec.Selector)
	if svc := objs.service; svc == nil {
		add("no Service")
	} else {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			add("the Service does not select the pods")
		}
		for _, p := range svc.Spec.Ports {
			resolves("Service port "+p.Name, p.TargetPort)
		}
	}
	if objs.pdb != nil {
		selects("the PodDisruptionBudget", objs.pdb.Spec.Selector)
	}
	if h := objs.hpa; h != nil {
		if ref := h.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
			add("the HPA scales %s/%s %s, not the Deployment", ref.APIVersion, ref.Kind, ref.Name)
		}
		if d.Spec.Replicas != nil {
			add("the Deployment sets replicas beside the HPA: every upgrade resets what the HPA chose")
		}
		if ct.Resources.Requests.Cpu().IsZero() {
			add("the HPA scales on CPU and the container requests none")
		}
	} else if d.Spec.Replicas == nil {
		add("no HPA and no replicas: one replica")
	}

	// Monitoring: the replicas scraped as the job the rules read, at their intervals.
	job, scrape := c.prom.ScrapeConfigs[0].JobName, c.prom.Global.ScrapeInterval
	if m := objs.monitor; m != nil {
		svcLabels := map[string]string{}
		if objs.service != nil {
			svcLabels = objs.service.Labels
			selected, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
			if err != nil || selected.Empty() || !selected.Matches(labels.Set(svcLabels)) {
				add("the ServiceMonitor does not select the Service")
			}
		}
		if got := svcLabels[m.Spec.JobLabel]; m.Spec.JobLabel == "" || got != job {
			add("the ServiceMonitor's job is not %q, which the alerts and the dashboard read (jobLabel %q: %q)", job, m.Spec.JobLabel, got)
		}
		for _, e := range m.Spec.Endpoints {
			if objs.service == nil || !slices.ContainsFunc(objs.service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port }) {
				add("the ServiceMonitor scrapes port %q, which the Service does not have", e.Port)
			}
			if got := served(e.Path, false); got != http.StatusOK {
				add("the ServiceMonitor scrapes %s: the service answers it %d", e.Path, got)
			}
			if e.Interval != scrape {
				add("the ServiceMonitor scrapes every %q; the rules assume %s", e.Interval, scrape)
			}
		}
	}
	if r := objs.rule; r != nil {
		eval := c.prom.Global.EvaluationInterval
		var names []string
		for _, g := range r.Spec.Groups {
			names = append(names, g.Name)
			if g.Interval != eval {
				add("PrometheusRule group %s is evaluated every %q; the rules assume %s", g.Name, g.Interval, eval)
			}
			g.Interval = ""
			i := slices.IndexFunc(c.rules, func(f ruleGroup) bool { return f.Name == g.Name })
			if i < 0 {
				add("PrometheusRule group %s is not in rules.yml", g.Name)
				continue
			}
			if want := c.rules[i]; !assert.ObjectsAreEqual(want, g) {
				add("PrometheusRule group %s differs from rules.yml, which promtool tests", g.Name)
			}
		}
		for _, g := range c.rules {
			if !slices.Contains(names, g.Name) {
				add("PrometheusRule lacks group %s of rules.yml", g.Name)
			}
		}
	}
	dashboards := 0
	label, _ := vals.PathValue("monitoring.dashboard.label")
	for _, cm := range objs.configMaps {
		if json, ok := cm.Data["seckill.json"]; ok {
			dashboards++
			if _, ok := cm.Labels[fmt.Sprint(label)]; !ok {
				add("ConfigMap %s holds the dashboard without the label Grafana's sidecar watches (%v)", cm.Name, label)
			}
			if json != c.dashboard {
				add("ConfigMap %s's dashboard differs from %s/seckill.json", cm.Name, dashboardsDir)
			}
		}
	}
	if on, _ := vals.PathValue("monitoring.dashboard.enabled"); on == true && dashboards != 1 {
		add("the dashboard is asked for and %d ConfigMaps hold it", dashboards)
	}
	return problems
}

// backendValues are the values a deployment must set, each left out in turn by refusalProblems.
var backendValues = []string{"backends.mysql.dsn", "backends.redis.addrs", "backends.etcd.endpoints", "backends.nats.urls", "secret.adminToken"}

// refusalProblems renders the chart with its defaults, and with a full values set less one
// backend at a time: each must fail, naming what to set.
func refusalProblems(dir string, full common.Values) []string {
	var problems []string
	if _, err := renderChart(dir, map[string]any{}); err == nil {
		problems = append(problems, "the chart renders with its defaults, every backend embedded in each replica")
	}
	raw, err := yaml.Marshal(full)
	if err != nil {
		return append(problems, err.Error())
	}
	for _, key := range backendValues {
		vals, err := common.ReadValues(raw) // a copy of full
		if err != nil {
			return append(problems, err.Error())
		}
		unset(vals, key)
		if _, err := renderChart(dir, vals); err == nil {
			problems = append(problems, fmt.Sprintf("the chart renders without %s", key))
		} else if !strings.Contains(err.Error(), key) {
			problems = append(problems, fmt.Sprintf("without %s the chart fails without naming it: %v", key, err))
		}
	}
	return problems
}

// unset deletes the value at path (dot-separated keys) in vals.
func unset(vals common.Values, path string) {
	m, key := holder(vals, path)
	delete(m, key)
}

// set sets the value at path in vals.
func set(vals common.Values, path string, v any) {
	m, key := holder(vals, path)
	m[key] = v
}

// holder returns the map of vals that holds path's last key, and that key; the maps on the way
// are made where missing.
func holder(vals common.Values, path string) (map[string]any, string) {
	keys := strings.Split(path, ".")
	m := map[string]any(vals)
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m, keys[len(keys)-1]
}

// chartProblems lints and renders the chart in dir with each of its values sets and checks every
// render; it renders the minimal set less each backend, which must fail.
func chartProblems(t *testing.T, dir string, checks chartChecks) []string {
	t.Helper()
	sets := chartValues(t, dir)
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		vals := sets[name]
		for _, p := range lintChart(dir, vals) {
			problems = append(problems, name+": "+p)
		}
		manifests, err := renderChart(dir, vals)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: does not render: %v", name, err))
			continue
		}
		for _, p := range checks.renderProblems(decodeChart(manifests), vals) {
			problems = append(problems, name+": "+p)
		}
	}
	minimal, ok := sets["minimal"]
	require.True(t, ok, "no ci/minimal-values.yaml in %s", dir)
	return append(problems, refusalProblems(dir, minimal)...)
}

// TestChart: the chart lints and renders with each values set, and every render is what the
// service needs (renderProblems); with a backend left out it refuses to render, saying which.
func TestChart(t *testing.T) {
	assert.Empty(t, chartProblems(t, chartDir, loadChartChecks(t)))
}

// TestChartValueSets: each values set renders the objects and the settings it is there for.
func TestChartValueSets(t *testing.T) {
	base := []string{"ConfigMap/seckill", "Deployment/seckill", "HorizontalPodAutoscaler/seckill", "PodDisruptionBudget/seckill",
		"Secret/seckill", "Service/seckill"}
	rows := []struct {
		name  string
		kinds []string          // the objects rendered, each once
		env   map[string]string // settings and their values, "" for one that must not be set
	}{
		{"minimal", base, map[string]string{"SECKILL_ADDR": ":8080", "SECKILL_DATA_DIR": "/data", "SECKILL_SHUTDOWN_TIMEOUT": "15s",
			"SECKILL_REDIS_ADDRS": "redis-master.cache.svc:6379", "SECKILL_REDIS_MODE": "", "SECKILL_ZK_SERVERS": "", "SECKILL_LOG_FORMAT": "json"}},
		{"sentinel", base, map[string]string{"SECKILL_REDIS_MODE": "sentinel", "SECKILL_REDIS_MASTER": "mymaster",
			"SECKILL_REDIS_ADDRS": "redis-node-0.redis-headless.cache.svc:26379,redis-node-1.redis-headless.cache.svc:26379,redis-node-2.redis-headless.cache.svc:26379"}},
		{"cluster", base, map[string]string{"SECKILL_REDIS_MODE": "cluster", "SECKILL_REDIS_ADDRS": "redis-cluster.cache.svc:6379",
			"SECKILL_ZK_SERVERS": "zookeeper-0.zookeeper-headless.coord.svc:2181,zookeeper-1.zookeeper-headless.coord.svc:2181,zookeeper-2.zookeeper-headless.coord.svc:2181"}},
		{"galera", base, map[string]string{"SECKILL_MYSQL_DSN": "seckill:secret@tcp(mariadb-galera-primary.db.svc:3306)/seckill?parseTime=true",
			"SECKILL_STRATEGY": "hybrid"}},
		{"hpa-off", slices.DeleteFunc(slices.Clone(base), func(k string) bool { return k == "HorizontalPodAutoscaler/seckill" }), nil},
		{"monitoring", append(slices.Clone(base), "ConfigMap/seckill-dashboard", "PrometheusRule/seckill", "ServiceMonitor/seckill"), nil},
		{"existing-secret", slices.DeleteFunc(slices.Clone(base), func(k string) bool { return k == "Secret/seckill" }),
			map[string]string{"SECKILL_MYSQL_DSN": "", "SECKILL_ADMIN_TOKEN": ""}},
	}
	sets := chartValues(t, chartDir)
	names := make([]string, len(rows))
	for i, tc := range rows {
		names[i] = tc.name
		t.Run(tc.name, func(t *testing.T) {
			vals, ok := sets[tc.name]
			require.True(t, ok, "no ci/%s-values.yaml", tc.name)
			manifests, err := renderChart(chartDir, vals)
			require.NoError(t, err)
			objs := decodeChart(manifests)
			require.Empty(t, objs.decodeFails)
			assert.ElementsMatch(t, tc.kinds, objs.kinds)
			require.NotNil(t, objs.deployment)
			env, _ := envOf(objs, objs.deployment.Spec.Template.Spec.Containers[0], "")
			for name, want := range tc.env {
				if want == "" {
					assert.NotContains(t, env, name)
				} else {
					assert.Equal(t, want, env[name], name)
				}
			}
		})
	}
	assert.ElementsMatch(t, names, slices.Collect(maps.Keys(sets)), "every values set has its row here")
}

// TestChartRefusesUnknownValues: values.schema.json names every key the chart reads, so a
// misspelt or misplaced one is refused when the chart renders, not silently ignored — a Redis
// mode that never reaches the replicas would run them on the wrong Redis topology.
func TestChartRefusesUnknownValues(t *testing.T) {
	raw, err := yaml.Marshal(chartValues(t, chartDir)["minimal"])
	require.NoError(t, err)
	for _, tc := range []struct{ name, path, want string }{
		{"a misspelt key", "backends.redis.mdoe", "mdoe"},
		{"a key at the wrong level", "backends.mode", "mode"},
		{"a setting outside env", "SECKILL_STRATEGY", "SECKILL_STRATEGY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := common.ReadValues(raw) // a copy of the minimal set
			require.NoError(t, err)
			set(vals, tc.path, "cluster")
			_, err = renderChart(chartDir, vals)
			require.Error(t, err, "the chart rendered with %s set", tc.path)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	vals, err := common.ReadValues(raw)
	require.NoError(t, err)
	set(vals, "backends.redis.mode", "clustre")
	_, err = renderChart(chartDir, vals)
	assert.ErrorContains(t, err, "/backends/redis/mode", "a Redis mode the service does not know is refused")
}

// copyChart copies the chart into a new directory, the files its links name included.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "seckill")
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		raw, err := os.ReadFile(p) // through a link, its target's contents
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), raw, 0o644)
	})
	require.NoError(t, err)
	return dst
}

// TestChartChecksCatchMistakes plants one mistake at a time in a copy of the chart: the checks
// must report each, so that TestChart passing means something.
func TestChartChecksCatchMistakes(t *testing.T) {
	checks := loadChartChecks(t)
	for _, tc := range []struct{ name, file, old, new, want string }{
		{"readiness on a path the service does not serve", "templates/deployment.yaml", "path: /readyz", "path: /ready",
			"readiness probe on /ready: the service answers it 404"},
		{"a variable the service does not read", "templates/configmap.yaml", "SECKILL_SHUTDOWN_TIMEOUT:", "SECKILL_DRAIN_TIMEOUT:",
			"the chart sets SECKILL_DRAIN_TIMEOUT, which is no setting of cmd/api"},
		{"liveness on readiness", "templates/deployment.yaml", "path: /healthz\n              port: http\n            periodSeconds: 10",
			"path: /readyz\n              port: http\n            periodSeconds: 10", "liveness probe on /readyz fails with a backend down"},
		{"readiness that ignores the backends", "templates/deployment.yaml", "path: /readyz", "path: /healthz",
			"readiness probe on /healthz stays 200 with a backend down"},
		{"probe on a port the container lacks", "templates/deployment.yaml", "path: /readyz\n              port: http", "path: /readyz\n              port: web",
			`readiness probe names port "web"`},
		{"container port the service does not listen on", "templates/deployment.yaml", `containerPort: {{ include "seckill.port" . }}`, "containerPort: 80",
			"container port http (80) is not the one the service listens on"},
		{"grace without the drain", "templates/deployment.yaml", "{{ add $d.preStopSeconds $d.timeoutSeconds $d.closeSeconds }}",
			"{{ add $d.preStopSeconds $d.closeSeconds }}", "terminationGracePeriodSeconds 10s does not cover"},
		{"no preStop", "templates/deployment.yaml", "          lifecycle:\n            preStop:\n              sleep:\n                seconds: {{ $d.preStopSeconds }}\n", "",
			"no preStop sleep"},
		{"a misspelt field", "templates/deployment.yaml", "automountServiceAccountToken:", "automountServiceAccountTokens:",
			`unknown field "spec.template.spec.automountServiceAccountTokens"`},
		{"a field at the wrong level", "templates/deployment.yaml", "          securityContext:\n            allowPrivilegeEscalation: false\n",
			"          securityContext:\n            runAsNonRoot: true\n            fsGroup: 65532\n", `unknown field "spec.template.spec.containers[0].securityContext.fsGroup"`},
		{"writable root", "templates/deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "the root filesystem is writable"},
		{"a backend left to be embedded", "templates/_helpers.tpl", `{{- if not $v.backends.nats.urls }}{{ $missing = append $missing "backends.nats.urls" }}{{ end -}}`, "",
			"the chart renders without backends.nats.urls"},
		{"replicas beside the HPA", "templates/deployment.yaml", "  {{- if not .Values.autoscaling.enabled }}\n  replicas: {{ .Values.replicaCount }}\n  {{- end }}",
			"  replicas: {{ .Values.replicaCount }}", "the Deployment sets replicas beside the HPA"},
		{"a rule changed", "files/rules.yml", "for: 15s", "for: 30s", "PrometheusRule group seckill-alerts differs from rules.yml"},
		{"rules at Prometheus's own interval", "templates/prometheusrule.yaml", "      interval: {{ include \"seckill.interval\" $ }}\n", "",
			`PrometheusRule group seckill-alerts is evaluated every ""`},
		{"the job named after the release", "templates/servicemonitor.yaml", "  jobLabel: app.kubernetes.io/name\n", "",
			`the ServiceMonitor's job is not "seckill"`},
		{"a dashboard the sidecar does not see", "templates/dashboard.yaml",
			"    {{ .Values.monitoring.dashboard.label }}: {{ .Values.monitoring.dashboard.labelValue | quote }}\n", "", "without the label"},
		{"a name Kubernetes refuses, which only lint sees", "templates/dashboard.yaml", `{{ include "seckill.fullname" . }}-dashboard`,
			`{{ include "seckill.fullname" . }}-Dashboard`, "monitoring: lint: object name does not conform to Kubernetes naming requirements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyChart(t)
			file := filepath.Join(dir, tc.file)
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Contains(t, string(raw), tc.old)
			require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(raw), tc.old, tc.new, 1)), 0o644))
			problems := chartProblems(t, dir, checks)
			assert.True(t, slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }),
				"want a problem with %q, got:\n%s", tc.want, strings.Join(problems, "\n"))
		})
	}
}

// TestChartCopyIsTheChart: the copy TestChartChecksCatchMistakes plants in has no problem
// before a mistake is planted, so that each problem it reports is the planted one's.
func TestChartCopyIsTheChart(t *testing.T) {
	assert.Empty(t, chartProblems(t, copyChart(t), loadChartChecks(t)))
}
