package report

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"image"
	"image/draw"
	"image/png"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/contract"
	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/scrape"
	"github.com/flashsale/seckill/loadtest/verify"
)

// TestReportHTML writes report.html the way the tool does (write) from a realistic run — a SQL
// baseline, a bare handler, five strategies with busy, unavailable and sold-out answers, one that
// oversold, one the server refused, lock histograms scraped from two instances' /metrics — and
// renders it in headless Chromium: every comparison chart is there once with its data drawn and
// a legend naming its rows, in the same colour for a row in every chart; there is a latency chart
// for each row that sold, naming outcomes; and the screenshot is a picture, not a blank page.
func TestReportHTML(t *testing.T) {
	chromium := needChromium(t)
	reports, sales := syntheticRun(t)
	dir := t.TempDir()
	require.NoError(t, Write(dir, testProvenance, "A synthetic run: 300 units, 1200 buyers per row.", reports, sales))
	page := "file://" + filepath.Join(dir, "report.html")

	dom := string(runChromium(t, chromium, "--dump-dom", page))
	figures := drawnCharts(dom)
	require.NotEmpty(t, figures, "no chart in the rendered page")
	assert.NotContains(t, dom, "ERROR", "outcomes are named, not vegeta's OK/ERROR")
	// An SVG's namespace is a name, not an address: it loads nothing.
	loads := svgNamespaceRE.ReplaceAllString(dom, "")
	assert.NotContains(t, loads, "http://", "the page loads nothing")
	assert.NotContains(t, loads, "https://", "the page loads nothing")

	sold := []string{"hybrid", "etcd", "pessimistic", "dblock", "naive"}
	want := map[string]struct {
		legend []string
		marks  func(f figure) int
		count  int
	}{
		// A line and a dot (its last sale) per row.
		"units":           {sold, func(f figure) int { return min(f.strokes(), f.fills()) }, len(sold)},
		"orders":          {append([]string{"baseline"}, sold...), figure.fills, 1 + len(sold)},
		"latency-selling": {sold, figure.fills, 3 * len(sold)},
		"latency-soldout": {[]string{BareRow, "hybrid", "etcd", "pessimistic", "dblock"}, figure.fills, 3 * 5},
		// pessimistic times its wait only; naive takes no lock.
		"locks": {[]string{"hybrid", "etcd", "pessimistic", "dblock"}, figure.fills, 6 + 6 + 3 + 6},
	}
	colours := map[string]string{}
	for id, w := range want {
		t.Run(id, func(t *testing.T) {
			found := figuresOf(figures, id)
			require.Len(t, found, 1, "chart %s", id)
			f := found[0]
			assert.NotEmpty(t, f.title)
			assert.GreaterOrEqual(t, f.ticks, 3, "axis ticks")
			assert.Equal(t, w.legend, f.order, "the legend names the rows")
			assert.Len(t, f.marks, len(w.legend), "marks in each row's colour, and in no other")
			assert.Equal(t, w.count, w.marks(f), "drawn marks")
			for label, colour := range f.legend {
				if c, ok := colours[label]; ok {
					assert.Equal(t, c, colour, "%s has one colour in every chart", label)
				}
				colours[label] = colour
			}
		})
	}
	assert.Len(t, slices.Compact(slices.Sorted(maps.Values(colours))), len(colours), "every row has a colour of its own")

	scatters := figuresOf(figures, "scatter")
	var rows []string
	for _, f := range scatters {
		rows = append(rows, f.row)
		assert.Contains(t, f.title, f.row)
		assert.GreaterOrEqual(t, f.ticks, 3, "axis ticks")
		assert.Len(t, f.marks, len(f.legend), "%s: a series per outcome in the legend", f.row)
		assert.Greater(t, f.fills(), 300, "%s: the requests are drawn", f.row)
		labels := strings.Join(f.order, " ")
		assert.Contains(t, labels, "ok (", f.row)
		assert.Contains(t, labels, "sold_out (", f.row)
	}
	assert.Equal(t, sold, rows, "one latency chart per row that sold, in order")
	assert.Contains(t, strings.Join(scatters[2].order, " "), "busy (", "pessimistic answered busy")

	shot := filepath.Join(dir, "report.png")
	runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,4000", "--hide-scrollbars", page)
	raw, err := os.ReadFile(shot)
	require.NoError(t, err)
	assert.Greater(t, len(raw), 100<<10, "a screenshot of charts is not a few kilobytes")
	img, err := png.Decode(bytes.NewReader(raw))
	require.NoError(t, err)
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
	count, white := map[[3]uint8]int{}, 0
	for i := 0; i+3 < len(rgba.Pix); i += 4 {
		if px := [3]uint8{rgba.Pix[i], rgba.Pix[i+1], rgba.Pix[i+2]}; px != [3]uint8{255, 255, 255} {
			count[px]++
		} else {
			white++ // most of the page: counted apart, the map stays small and the test fast under -race
		}
	}
	assert.Less(t, white, len(rgba.Pix)/4*90/100, "at most 90% of the page is white")
	assert.Greater(t, len(count), 200, "distinct colours: a rendered page, not a blank one")
	for label, colour := range colours {
		var r, g, bl uint8
		_, err := fmt.Sscanf(colour, "#%02x%02x%02x", &r, &g, &bl)
		require.NoError(t, err)
		// The legend swatches alone are a few hundred pixels: the rest are the row's lines and bars.
		assert.Greater(t, count[[3]uint8{r, g, bl}], 2000, "pixels of %s's colour %s in the screenshot", label, colour)
	}
}

// needChromium is the path of chromium; without it the test skips, or fails where the backends
// are required (CI).
func needChromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err == nil {
		return path
	}
	msg := "report.html is checked in headless Chromium: apt-get install -y chromium"
	if os.Getenv("SECKILL_TEST_REQUIRE_BACKENDS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runChromium runs headless Chromium on args with a profile of its own and returns its stdout.
// The flags keep it off the network and away from any GPU, sandbox or first-run work.
func runChromium(t *testing.T, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium %v: %s", args, stderr.String())
	return stdout.Bytes()
}

// figure is one chart of the rendered page, as Chromium's DOM has it.
type figure struct {
	id, row, title string
	ticks          int               // numbers along the plot's axes
	legend         map[string]string // label -> swatch colour
	order          []string          // the legend's labels in order
	marks          map[string]mark   // the plot's paths drawn in a legend colour, by colour
}

// mark counts the paths of one colour in a plot: filled (bars, dots) and stroked (lines).
type mark struct {
	fills, strokes int
	lines          []string // the stroked paths' data
}

// The page's SVG is gonum's vgsvg: every mark and swatch a <path> with its colour in a style
// attribute, every label a <text>, in the order they were drawn. The HTML around them says
// which SVG is the plot and which the legend.
var (
	figureRE  = regexp.MustCompile(`(?s)<figure class="chart" data-chart="([^"]+)"(?: data-row="([^"]*)")?>(.*?)</figure>`)
	titleRE   = regexp.MustCompile(`(?s)<h3>(.*?)</h3>`)
	tagRE     = regexp.MustCompile(`<[^>]*>`)
	plotRE    = regexp.MustCompile(`(?s)<div class="plot">(.*?)</div>`)
	legendRE  = regexp.MustCompile(`(?s)<div class="legend">(.*?)</div>`)
	elementRE = regexp.MustCompile(`(?s)<path d="([^"]*)"\s*(?:style="([^"]*)")?[^>]*>|<text[^>]*>([^<]*)</text>`)
	colourRE  = regexp.MustCompile(`(fill|stroke):(#[0-9A-Fa-f]{6})`)
	numberRE  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

	svgNamespaceRE = regexp.MustCompile(`xmlns(:xlink)?="http://www\.w3\.org/[^"]*"`)
)

// drawnCharts finds the charts in a DOM dumped by Chromium.
func drawnCharts(dom string) []figure {
	var out []figure
	for _, m := range figureRE.FindAllStringSubmatch(dom, -1) {
		f := figure{id: m[1], row: html.UnescapeString(m[2])}
		body := m[3]
		if t := titleRE.FindStringSubmatch(body); t != nil {
			f.title = html.UnescapeString(tagRE.ReplaceAllString(t[1], ""))
		}
		if g := legendRE.FindStringSubmatch(body); g != nil {
			f.order, f.legend = legendOf(g[1])
		}
		if g := plotRE.FindStringSubmatch(body); g != nil {
			f.ticks, f.marks = plotOf(g[1], f.legend)
		}
		out = append(out, f)
	}
	return out
}

// legendOf reads a legend's SVG: each label with the colour of the swatch drawn just before it.
func legendOf(svg string) (order []string, colours map[string]string) {
	colours = map[string]string{}
	swatch := ""
	for _, e := range elementRE.FindAllStringSubmatch(svg, -1) {
		if strings.HasPrefix(e[0], "<path") {
			if c := colourRE.FindStringSubmatch(e[2]); c != nil {
				swatch = strings.ToLower(c[2])
			}
			continue
		}
		label := html.UnescapeString(e[3])
		order, colours[label], swatch = append(order, label), swatch, ""
	}
	return order, colours
}

// plotOf reads a plot's SVG: how many of its texts are numbers (the ticks), and its marks: every
// filled path but the white background, and the lines in a colour of its legend (the other lines
// are the grid, the axes and the reference lines).
func plotOf(svg string, legend map[string]string) (ticks int, marks map[string]mark) {
	inLegend := map[string]bool{}
	for _, c := range legend {
		inLegend[c] = true
	}
	marks = map[string]mark{}
	for _, e := range elementRE.FindAllStringSubmatch(svg, -1) {
		if !strings.HasPrefix(e[0], "<path") {
			if numberRE.MatchString(strings.TrimSpace(e[3])) {
				ticks++
			}
			continue
		}
		for _, c := range colourRE.FindAllStringSubmatch(e[2], -1) {
			colour := strings.ToLower(c[2])
			if c[1] == "fill" && colour == "#ffffff" || c[1] == "stroke" && !inLegend[colour] {
				continue
			}
			m := marks[colour]
			if c[1] == "fill" {
				m.fills++
			} else {
				m.strokes++
				m.lines = append(m.lines, e[1])
			}
			marks[colour] = m
		}
	}
	return ticks, marks
}

// fills and strokes are the figure's marks in its legend's colours.
func (f figure) fills() (n int) {
	for _, m := range f.marks {
		n += m.fills
	}
	return n
}

func (f figure) strokes() (n int) {
	for _, m := range f.marks {
		n += m.strokes
	}
	return n
}

func figuresOf(figures []figure, id string) []figure {
	return slices.DeleteFunc(slices.Clone(figures), func(f figure) bool { return f.id != id })
}

// syntheticRun is a comparison as the tool would have measured it, through the tool's own
// functions: sales of synthetic answers measured by newReport, the lock histograms scraped
// from two instances' /metrics by sampleMetrics around each row.
func syntheticRun(t *testing.T) ([]Row, map[string]attack.Sale) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(14, 4))
	instances := []*fakeMetrics{{}, {}}
	var targets []string
	for _, m := range instances {
		srv := httptest.NewServer(m)
		t.Cleanup(srv.Close)
		targets = append(targets, srv.URL)
	}
	scrapeAll := func() []scrape.Sample {
		var out []scrape.Sample
		for _, u := range targets {
			s, err := scrape.Read(context.Background(), http.DefaultClient, u)
			require.NoError(t, err)
			out = append(out, s)
		}
		return out
	}
	const stock, buyers, baselineRate = 300, 1200, 950.0
	base := Row{Strategy: "baseline", Family: "SQL: SELECT ... FOR UPDATE, UPDATE, INSERT per order (no HTTP)", OrdersPerSecond: baselineRate,
		Requests: buyers, Attempts: buyers, Outcomes: map[string]int{attack.OK: stock, attack.SoldOut: buyers - stock}}
	bare := Row{Strategy: BareRow, Family: "net/http alone", Steady: &attack.Steady{Duration: 5 * time.Second, Requests: 92000,
		Outcomes: map[string]int{attack.SoldOut: 92000}, Throughput: 18400, P50: 1800 * time.Microsecond, P90: 3 * time.Millisecond, P99: 7 * time.Millisecond}}
	reports := []Row{base, bare}
	sales := map[string]attack.Sale{}
	for _, row := range []struct {
		strategy     string
		perSecond    float64       // requests sent per second while selling
		latency      time.Duration // typical latency of a sale
		busy, failed float64       // shares of the selling requests answered busy, unavailable
		oversell     int
		wait, hold   time.Duration // typical lock wait and hold; 0: none recorded
		refused      bool
	}{
		{"hybrid", 2600, 14 * time.Millisecond, 0, 0, 0, 9 * time.Millisecond, 2 * time.Millisecond, false},
		{"etcd", 1900, 22 * time.Millisecond, 0.03, 0.01, 0, 15 * time.Millisecond, 3 * time.Millisecond, false},
		{"pessimistic", 4200, 7 * time.Millisecond, 0.12, 0, 0, 4 * time.Millisecond, 0, false},
		{"dblock", 1700, 18 * time.Millisecond, 0.02, 0, 0, 12 * time.Millisecond, 2500 * time.Microsecond, false},
		{"naive", 3300, 5 * time.Millisecond, 0, 0, 260, 0, 0, false},
		{"unguarded-redis", 3000, 3 * time.Millisecond, 0, 0, 0, 0, 0, true},
	} {
		before := scrapeAll()
		s := syntheticSale(rnd, stock, buyers, row.perSecond, row.latency, row.busy, row.failed, row.oversell, row.refused)
		for _, m := range instances {
			m.observe(rnd, row.strategy, 30, row.wait, row.hold)
		}
		r := NewRow(row.strategy, row.strategy, "lt-"+row.strategy, s, "")
		r.Family = families[row.strategy]
		sales[r.Strategy] = s
		if row.refused {
			r.Skipped = "refused by the server (the unsafe strategies need SECKILL_ALLOW_UNSAFE=true)"
			reports = append(reports, r)
			continue
		}
		sold := int64(r.Outcomes[attack.OK])
		r.Verdict = verify.Verdict{Audit: contract.Audit{InitialStock: stock, Stock: max(0, stock-sold), OrderedQuantity: sold, Orders: sold, DistinctBuyers: sold},
			Oversold: max(0, sold-stock)}
		r.VsBaseline = r.OrdersPerSecond / baselineRate
		r.Locks = scrape.NewLockTimes(row.strategy, before, scrapeAll())
		if !r.ExpectOversell {
			scale := float64(row.latency) / float64(10*time.Millisecond)
			r.Steady = &attack.Steady{Duration: 5 * time.Second, Requests: 60000, Outcomes: map[string]int{attack.SoldOut: 60000}, Throughput: 12000,
				P50: time.Duration(scale * 2.6 * float64(time.Millisecond)), P90: time.Duration(scale * 4.5 * float64(time.Millisecond)),
				P99: time.Duration(scale * 11 * float64(time.Millisecond))}
			r.Steady.VsBare = r.Steady.Throughput / bare.Steady.Throughput
		}
		r.Judge()
		reports = append(reports, r)
	}
	return reports, sales
}

// syntheticSale answers buyers requests sent at perSecond: the first stock+oversell sales are
// 201s — but for the shares answered busy (retried in a second round after a Retry-After of a
// second) and unavailable — the rest 409 sold_out, much faster; latencies spread around typical
// as a real sale's do. A refused sale is all 400s.
func syntheticSale(rnd *rand.Rand, stock, buyers int, perSecond float64, typical time.Duration, busy, failed float64, oversell int, refused bool) attack.Sale {
	s := attack.Sale{Final: map[int]*vegeta.Result{}}
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	spread := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * math.Exp(0.55*rnd.NormFloat64()))
	}
	sold, end := 0, time.Duration(0)
	answer := func(i int, at time.Duration, round bool) (retry bool) {
		code, body, latency := 409, errBody(attack.SoldOut), spread(typical/12)
		switch p := rnd.Float64(); {
		case refused:
			code, body, latency = 400, errBody(attack.Invalid), spread(time.Millisecond)
		case sold >= stock+oversell:
		case !round && p < busy:
			code, body, latency, retry = 429, errBody(attack.Busy), spread(2*typical), true
		case !round && p < busy+failed:
			code, body, latency = 503, errBody(attack.Unavailable), spread(3*typical)
		default:
			sold++
			code, body, latency = 201, fmt.Sprintf(`{"order_id":"o%d","user_id":"u%d"}`, i, i), spread(typical)
		}
		r := &vegeta.Result{Attack: "sale", Seq: uint64(len(s.Results)), Code: uint16(code), Body: []byte(body),
			Timestamp: start.Add(at), Latency: latency, URL: fmt.Sprintf("http://127.0.0.1/api/v1/products/p/orders?lt=%d", i)}
		s.Results, s.Final[i] = append(s.Results, r), r
		end = max(end, at+latency)
		return retry
	}
	gap := time.Duration(float64(time.Second) / perSecond)
	var retries []int
	for i := range buyers {
		if answer(i, time.Duration(i)*gap, false) {
			retries = append(retries, i)
		}
	}
	retryAt := end + time.Second
	for j, i := range retries {
		answer(i, retryAt+time.Duration(j)*gap, true)
	}
	return s
}

// fakeMetrics is an instance's /metrics with the lock histograms of the service (exponential
// buckets from 0.1 ms, doubling, 16 of them) and the lines around them that a scrape skips.
type fakeMetrics struct {
	mu    sync.Mutex
	waits map[string][]float64 // by strategy, seconds
	holds map[string][]float64
}

// observe records n lock acquisitions of strategy, with waits and holds spread around the
// typical ones (0: that histogram records nothing).
func (m *fakeMetrics) observe(rnd *rand.Rand, strategy string, n int, wait, hold time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waits == nil {
		m.waits, m.holds = map[string][]float64{}, map[string][]float64{}
	}
	for range n {
		if wait > 0 {
			m.waits[strategy] = append(m.waits[strategy], wait.Seconds()*math.Exp(0.7*rnd.NormFloat64()))
		}
		if hold > 0 {
			m.holds[strategy] = append(m.holds[strategy], hold.Seconds()*math.Exp(0.4*rnd.NormFloat64()))
		}
	}
}

func (m *fakeMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 42")
	for _, h := range []struct {
		metric string
		values map[string][]float64
	}{{scrape.LockWait, m.waits}, {scrape.LockHold, m.holds}} {
		fmt.Fprintf(w, "# TYPE %s histogram\n", h.metric)
		for _, strategy := range slices.Sorted(maps.Keys(h.values)) {
			values := h.values[strategy]
			sum := 0.0
			for _, v := range values {
				sum += v
			}
			for k := range 16 {
				le := 0.0001 * math.Pow(2, float64(k))
				n := 0
				for _, v := range values {
					if v <= le {
						n++
					}
				}
				fmt.Fprintf(w, "%s_bucket{strategy=%q,le=%q} %d\n", h.metric, strategy, fmt.Sprint(le), n)
			}
			fmt.Fprintf(w, "%s_bucket{strategy=%q,le=\"+Inf\"} %d\n%s_sum{strategy=%q} %g\n%s_count{strategy=%q} %d\n",
				h.metric, strategy, len(values), h.metric, strategy, sum, h.metric, strategy, len(values))
		}
	}
	fmt.Fprintln(w, `seckill_lock_lost_total{strategy="hybrid"} 0`)
}
