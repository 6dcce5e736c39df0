package report

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/scrape"
)

// The charts of report.html are inline SVG laid out here, in Go: the page carries no script and
// loads nothing, so it reads the same on a machine without a network and renders the same in the
// test's headless Chromium. The geometry is in SVG units; the page scales each chart to its width.
const (
	chartWidth = 1160.0
	chartLeft  = 16.0 // the title and the legend start here
	plotLeft   = 80.0 // room for the y ticks and the y axis title
	plotRight  = 28.0
	charWidth  = 6.6 // the average width of a 12px sans-serif character: the layout of labels
)

// rowPalette colours the rows that sold, in the order of the report, the same in every chart.
// The reference rows (the SQL baseline, the bare handler) are grey.
var rowPalette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#17becf",
	"#9c755f", "#d37295", "#8c8c00", "#1f3b73", "#a0522d", "#2f8f6f"}

const (
	baselineColor = "#6f6f6f"
	bareColor     = "#b5b0ab"
)

// outcomes are the outcomes of classify in the order the latency charts list them, each with its
// colour in every chart.
var outcomes = []struct{ name, color string }{
	{attack.OK, "#2ca02c"},
	{attack.Queued, "#1f77b4"},
	{attack.SoldOut, "#98a2ad"},
	{attack.Busy, "#ff7f0e"},
	{attack.AlreadyPurchased, "#9467bd"},
	{attack.Invalid, "#8c564b"},
	{attack.Unavailable, "#e377c2"},
	{attack.OtherClient, "#bcbd22"},
	{attack.ServerError, "#d62728"},
	{attack.Transport, "#111111"},
}

// chart is one SVG chart: what the template draws, element by element.
type chart struct {
	ID     string // data-chart: what the chart shows (the page's test finds charts by it)
	Row    string // data-row: the row of a chart of one row
	Title  string
	Note   string // under the chart: what the figures are and where they come from
	Width  float64
	Height float64
	Swatch *svgRect // the row's colour beside the title of a chart of one row
	Legend []legendItem
	Axes   []svgLine // grid, axis and reference lines, under the data
	Texts  []svgText // the title, ticks, axis titles, reference labels
	// The data, drawn over the axes.
	Rects   []svgRect
	Paths   []svgPath
	Circles []svgCircle
	Labels  []svgText
	plot    box
}

type box struct{ X, Y, W, H float64 }

type legendItem struct {
	Swatch svgRect
	Text   svgText
}

type svgLine struct {
	X1, Y1, X2, Y2 float64
	Class          string
}

type svgText struct {
	X, Y   float64
	Text   string
	Anchor string // text-anchor; "": start
	Class  string
	Rotate float64 // degrees around (X, Y)
}

type svgRect struct {
	X, Y, W, H float64
	Fill       string
	Title      string // the tooltip
}

// svgPath is a line, drawn with round caps and joins — so that a zero-length segment ("h0") is
// a dot and a path of them a series of dots.
type svgPath struct {
	D      string
	Stroke string
	Width  float64
	Title  string
}

type svgCircle struct {
	X, Y, R float64
	Fill    string
	Title   string
}

type legendEntry struct{ label, color string }

// newChart lays out the title and the legend (wrapped to the width) and places the plot area
// under them, plotX from the left and plotH high.
func newChart(id, title string, legend []legendEntry, plotX, plotH float64) *chart {
	c := &chart{ID: id, Title: title, Width: chartWidth}
	c.Texts = append(c.Texts, svgText{X: chartLeft, Y: 24, Text: title, Class: "title"})
	x, y := chartLeft, 50.0
	for _, e := range legend {
		w := 20 + charWidth*float64(len([]rune(e.label))) + 22
		if x > chartLeft && x+w > chartWidth-plotRight {
			x, y = chartLeft, y+20
		}
		c.Legend = append(c.Legend, legendItem{Swatch: svgRect{X: x, Y: y - 10, W: 14, H: 11, Fill: e.color},
			Text: svgText{X: x + 20, Y: y, Text: e.label}})
		x += w
	}
	c.plot = box{X: plotX, Y: y + 22, W: chartWidth - plotX - plotRight, H: plotH}
	c.Height = c.plot.Y + c.plot.H + 48
	return c
}

func (c *chart) bottom() float64 { return c.plot.Y + c.plot.H }

// yAxis draws s's grid lines and ticks across the plot, and the y axis title.
func (c *chart) yAxis(s scale, title string) {
	for _, v := range s.ticks() {
		y := s.at(v)
		c.Axes = append(c.Axes, svgLine{X1: c.plot.X, Y1: y, X2: c.plot.X + c.plot.W, Y2: y, Class: "grid"})
		c.Texts = append(c.Texts, svgText{X: c.plot.X - 7, Y: y + 4, Text: tickLabel(v), Anchor: "end", Class: "tick"})
	}
	c.Axes = append(c.Axes, svgLine{X1: c.plot.X, Y1: c.plot.Y, X2: c.plot.X, Y2: c.bottom(), Class: "axis"})
	c.Texts = append(c.Texts, svgText{X: c.plot.X - 56, Y: c.plot.Y + c.plot.H/2, Text: title, Anchor: "middle", Class: "axis-title", Rotate: -90})
}

// xAxis draws s's grid lines and ticks along the plot, and the x axis title.
func (c *chart) xAxis(s scale, title string) {
	for _, v := range s.ticks() {
		x := s.at(v)
		c.Axes = append(c.Axes, svgLine{X1: x, Y1: c.plot.Y, X2: x, Y2: c.bottom(), Class: "grid"})
		c.Texts = append(c.Texts, svgText{X: x, Y: c.bottom() + 17, Text: tickLabel(v), Anchor: "middle", Class: "tick"})
	}
	c.xTitle(title)
}

func (c *chart) xTitle(title string) {
	c.Axes = append(c.Axes, svgLine{X1: c.plot.X, Y1: c.bottom(), X2: c.plot.X + c.plot.W, Y2: c.bottom(), Class: "axis"})
	if title != "" {
		c.Texts = append(c.Texts, svgText{X: c.plot.X + c.plot.W/2, Y: c.bottom() + 38, Text: title, Anchor: "middle", Class: "axis-title"})
	}
}

// scale maps values to pixels, linearly or by decades.
type scale struct {
	lo, hi   float64
	from, to float64 // the pixels of lo and hi
	step     float64 // between ticks, linear scales only
	log      bool
}

// linearScale runs from 0 to a round number at or above hi.
func linearScale(hi, from, to float64) scale {
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi / 5)
	return scale{hi: math.Ceil(hi/step-1e-9) * step, from: from, to: to, step: step}
}

// logScale runs over the whole decades around lo and hi (both above 0): latencies span from
// tenths of a millisecond to seconds, and the fast rows must stay readable beside the slow ones.
func logScale(lo, hi, from, to float64) scale {
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	return scale{lo: lo, hi: hi, from: from, to: to, log: true}
}

func (s scale) at(v float64) float64 {
	var f float64
	if s.log {
		f = math.Log10(math.Max(v, s.lo)/s.lo) / math.Log10(s.hi/s.lo)
	} else {
		f = (v - s.lo) / (s.hi - s.lo)
	}
	return s.from + f*(s.to-s.from)
}

// ticks are round values over the scale: every step, or every decade (with 2 and 5 between
// when there are few).
func (s scale) ticks() []float64 {
	var out []float64
	if !s.log {
		for i := 0.0; s.lo+i*s.step <= s.hi*(1+1e-9); i++ {
			out = append(out, s.lo+i*s.step)
		}
		return out
	}
	few := math.Log10(s.hi/s.lo) <= 3.01
	for d := s.lo; d <= s.hi*1.001; d *= 10 {
		out = append(out, d)
		if few && d*10 <= s.hi*1.001 {
			out = append(out, 2*d, 5*d)
		}
	}
	return out
}

// niceStep is the 1, 2 or 5 times a power of ten at or above x.
func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	switch f := x / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}

func tickLabel(v float64) string { return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64) }

// svgNumber prints a coordinate: a tenth of a unit is finer than any screen shows.
func svgNumber(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// msText prints a latency in milliseconds with the digits that matter at its size.
func msText(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.2f", v)
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// chartRow is one row of the report as the charts see it.
type chartRow struct {
	Row
	color   string
	results []*vegeta.Result  // every attempt of the sale; nil for a reference row (baseline, bare handler)
	queued  []attack.Accepted // what became of each 202 of the sale
	start   time.Time         // the sale's first request: time 0 of its time axes
}

// chartRows are the rows to chart, with their colours: every row that was not skipped.
func chartRows(reports []Row, sales map[string]attack.Sale) []chartRow {
	var rows []chartRow
	for _, r := range reports {
		if r.Skipped != "" {
			continue
		}
		row := chartRow{Row: r, color: baselineColor}
		if r.Strategy == BareRow {
			row.color = bareColor
		}
		if s, ok := sales[r.Strategy]; ok && len(s.Results) > 0 {
			row.color = rowPalette[len(rowsWithSales(rows))%len(rowPalette)]
			row.results, row.queued, row.start = s.Results, s.Queued, s.Results[0].Timestamp
			for _, res := range s.Results {
				if res.Timestamp.Before(row.start) {
					row.start = res.Timestamp
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}

func rowsWithSales(rows []chartRow) []chartRow {
	return slices.DeleteFunc(slices.Clone(rows), func(r chartRow) bool { return r.results == nil })
}

func legendOf(rows []chartRow) []legendEntry {
	out := make([]legendEntry, len(rows))
	for i, r := range rows {
		out[i] = legendEntry{r.Strategy, r.color}
	}
	return out
}

// since is when something happened in the row's sale, in seconds from its first request.
func (r chartRow) since(t time.Time) float64 { return t.Sub(r.start).Seconds() }

// lastSale is the answer of the row's last 201, in seconds; -1 if it sold nothing.
func (r chartRow) lastSale() float64 {
	last := -1.0
	for _, res := range r.results {
		if res.Code == http.StatusCreated {
			last = max(last, r.since(res.End()))
		}
	}
	return last
}

// charts are report.html's charts: those that compare the rows, and one latency chart per row
// that sold.
func charts(reports []Row, sales map[string]attack.Sale) (comparison, perRow []chart) {
	rows := chartRows(reports, sales)
	for _, build := range []func([]chartRow) (chart, bool){unitsChart, ordersChart, sellingLatencyChart, soldOutLatencyChart, lockChart} {
		if c, ok := build(rows); ok {
			comparison = append(comparison, c)
		}
	}
	return comparison, append(queueCharts(rows), latencyScatters(rowsWithSales(rows))...)
}

// unitsChart is the units sold over time, a line per row: how fast each sale went, and whether
// it stopped at the stock.
func unitsChart(rows []chartRow) (chart, bool) {
	rows = rowsWithSales(rows)
	if len(rows) == 0 {
		return chart{}, false
	}
	sold := make([][]float64, len(rows))
	var stock int64
	most, end := 0, 0.0
	for i, r := range rows {
		for _, res := range r.results {
			if res.Code == http.StatusCreated {
				sold[i] = append(sold[i], r.since(res.End()))
			}
		}
		slices.Sort(sold[i])
		most = max(most, len(sold[i]))
		if n := len(sold[i]); n > 0 {
			end = max(end, sold[i][n-1])
		}
		stock = max(stock, r.Verdict.Audit.InitialStock)
	}
	c := newChart("units", "Units sold over time", legendOf(rows), plotLeft, 300)
	x := linearScale(end*1.03, c.plot.X, c.plot.X+c.plot.W)
	y := linearScale(float64(max(int64(most), stock))*1.05, c.bottom(), c.plot.Y)
	c.yAxis(y, "units sold (201s)")
	c.xAxis(x, "seconds since the sale's first request")
	if stock > 0 {
		sy := y.at(float64(stock))
		c.Axes = append(c.Axes, svgLine{X1: c.plot.X, Y1: sy, X2: c.plot.X + c.plot.W, Y2: sy, Class: "ref"})
		c.Texts = append(c.Texts, svgText{X: c.plot.X + c.plot.W - 4, Y: sy - 5, Text: fmt.Sprintf("stock %d", stock), Anchor: "end", Class: "ref-label"})
	}
	for i, r := range rows {
		n := len(sold[i])
		title := fmt.Sprintf("%s: %d units", r.Strategy, n)
		c.Paths = append(c.Paths, svgPath{D: countPath(sold[i], x, y), Stroke: r.color, Width: 2.5, Title: title})
		if n > 0 {
			c.Circles = append(c.Circles, svgCircle{X: x.at(sold[i][n-1]), Y: y.at(float64(n)), R: 4.5, Fill: r.color,
				Title: fmt.Sprintf("%s in %.2f s", title, sold[i][n-1])})
		}
	}
	c.Note = "Each line is one row's sale: its 201s counted by the time they were answered (retried busy answers included), " +
		"from the sale's first request; the dot is its last sale. A line above the stock oversold."
	return *c, true
}

// countPath is the line of a count over time: times sorted, in seconds, the count rising by one
// at each.
func countPath(times []float64, x, y scale) string {
	var d strings.Builder
	fmt.Fprintf(&d, "M%s %s", svgNumber(x.at(0)), svgNumber(y.at(0)))
	// At most about 600 vertices a line: a 40k-unit sale would otherwise weigh megabytes.
	step := max(1, len(times)/600)
	for j := step - 1; j < len(times); j += step {
		fmt.Fprintf(&d, "L%s %s", svgNumber(x.at(times[j])), svgNumber(y.at(float64(j+1))))
	}
	if n := len(times); n > 0 && (n-1)%step != step-1 {
		fmt.Fprintf(&d, "L%s %s", svgNumber(x.at(times[n-1])), svgNumber(y.at(float64(n))))
	}
	return d.String()
}

// Colours of the queue chart's two lines.
const (
	acceptedColor = "#4e79a7"
	placedColor   = "#59a14f"
)

// queueCharts are, for each row whose sale was answered 202, its accepted and its placed units
// over time: how far the writers ran behind admission, and whether they caught up.
func queueCharts(rows []chartRow) []chart {
	var out []chart
	for _, r := range rows {
		if r.Queue == nil || len(r.queued) == 0 {
			continue
		}
		var accepted, placed []float64
		for _, q := range r.queued {
			accepted = append(accepted, r.since(q.Accepted))
			if q.Placed() {
				placed = append(placed, r.since(q.Ended))
			}
		}
		slices.Sort(accepted)
		slices.Sort(placed)
		end := accepted[len(accepted)-1]
		if len(placed) > 0 {
			end = max(end, placed[len(placed)-1])
		}
		legend := []legendEntry{{fmt.Sprintf("accepted, 202 (%d)", len(accepted)), acceptedColor}, {fmt.Sprintf("placed (%d)", len(placed)), placedColor}}
		c := newChart("queue", r.Strategy+": units accepted and placed over time", legend, plotLeft, 240)
		c.Row = r.Strategy
		c.Swatch = &svgRect{X: chartLeft, Y: 11, W: 14, H: 14, Fill: r.color}
		c.Texts[0].X += 22
		x := linearScale(end*1.03, c.plot.X, c.plot.X+c.plot.W)
		y := linearScale(float64(len(accepted))*1.05, c.bottom(), c.plot.Y)
		c.yAxis(y, "units")
		c.xAxis(x, "seconds since the sale's first request")
		c.Paths = append(c.Paths,
			svgPath{D: countPath(accepted, x, y), Stroke: acceptedColor, Width: 2.5, Title: fmt.Sprintf("accepted: %d units", len(accepted))},
			svgPath{D: countPath(placed, x, y), Stroke: placedColor, Width: 2.5, Title: fmt.Sprintf("placed: %d units", len(placed))})
		c.Note = fmt.Sprintf("Each 202 counted when it was answered, and again when a client polling its order saw it placed; "+
			"the gap between the lines is the queue. %d rejected, %d never ended; 202 to final state p50 %s ms, p99 %s ms.",
			r.Queue.Rejected, r.Queue.Unended, Milliseconds(r.Queue.EndP50), Milliseconds(r.Queue.EndP99))
		out = append(out, *c)
	}
	return out
}

// ordersChart is the orders per second of every row while it sold, a bar each, beside the SQL
// baseline when the run measured it.
func ordersChart(rows []chartRow) (chart, bool) {
	rows = slices.DeleteFunc(slices.Clone(rows), func(r chartRow) bool { return r.results == nil && r.OrdersPerSecond == 0 })
	if len(rows) == 0 {
		return chart{}, false
	}
	labels, most := 0, 0.0
	for _, r := range rows {
		labels = max(labels, len([]rune(r.Strategy)))
		most = max(most, r.OrdersPerSecond)
	}
	const band = 30.0
	c := newChart("orders", "Orders per second while selling", legendOf(rows), max(plotLeft, chartLeft+charWidth*float64(labels)+16), band*float64(len(rows)))
	x := linearScale(most*1.3, c.plot.X, c.plot.X+c.plot.W)
	c.xAxis(x, "orders/s (201s over the selling phase)")
	c.Axes = append(c.Axes, svgLine{X1: c.plot.X, Y1: c.plot.Y, X2: c.plot.X, Y2: c.bottom(), Class: "axis"})
	for i, r := range rows {
		top := c.plot.Y + band*float64(i) + 5
		text := fmt.Sprintf("%.0f", r.OrdersPerSecond)
		if r.VsBaseline > 0 {
			text += fmt.Sprintf(" (%.2fx baseline)", r.VsBaseline)
		}
		if r.Verdict.Oversold > 0 {
			text += fmt.Sprintf(", oversold by %d", r.Verdict.Oversold)
		}
		c.Texts = append(c.Texts, svgText{X: c.plot.X - 8, Y: top + band/2, Text: r.Strategy, Anchor: "end", Class: "tick"})
		c.Rects = append(c.Rects, svgRect{X: c.plot.X, Y: top, W: x.at(r.OrdersPerSecond) - c.plot.X, H: band - 10, Fill: r.color,
			Title: r.Strategy + ": " + text + " orders/s"})
		c.Labels = append(c.Labels, svgText{X: x.at(r.OrdersPerSecond) + 6, Y: top + band/2, Text: text, Class: "value"})
	}
	c.Note = "Orders answered 201 over the selling phase (from the first request to the last 201). " +
		"The baseline is the per-order SELECT ... FOR UPDATE transaction in SQL, without HTTP."
	return *c, true
}

// barSeries is one row of a grouped bar chart: a value per group, 0 for none.
type barSeries struct {
	label, color string
	values       []float64
	titles       []string // the tooltip of each bar
}

// groupedBars draws a bar per series in each group, on a scale by decades.
func groupedBars(id, title, yTitle, note string, groups []string, series []barSeries) (chart, bool) {
	lo, hi := math.Inf(1), 0.0
	for _, s := range series {
		for _, v := range s.values {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		return chart{}, false
	}
	legend := make([]legendEntry, len(series))
	for i, s := range series {
		legend[i] = legendEntry{s.label, s.color}
	}
	c := newChart(id, title, legend, plotLeft, 280)
	c.Note = note
	y := logScale(lo, hi, c.bottom(), c.plot.Y)
	c.yAxis(y, yTitle)
	c.xTitle("")
	group := c.plot.W / float64(len(groups))
	bar := group * 0.8 / float64(len(series))
	for g, name := range groups {
		left := c.plot.X + group*float64(g)
		if g > 0 {
			c.Axes = append(c.Axes, svgLine{X1: left, Y1: c.plot.Y, X2: left, Y2: c.bottom(), Class: "grid"})
		}
		c.Texts = append(c.Texts, svgText{X: left + group/2, Y: c.bottom() + 18, Text: name, Anchor: "middle", Class: "tick"})
		for i, s := range series {
			v := s.values[g]
			if v <= 0 {
				continue
			}
			x, top := left+group*0.1+bar*float64(i), y.at(v)
			c.Rects = append(c.Rects, svgRect{X: x + 1, Y: top, W: bar - 2, H: c.bottom() - top, Fill: s.color, Title: s.titles[g]})
			if bar >= 28 {
				c.Labels = append(c.Labels, svgText{X: x + bar/2, Y: top - 4, Text: msText(v), Anchor: "middle", Class: "value"})
			}
		}
	}
	return *c, true
}

// percentileSeries is a row's p50, p90 and p99 in milliseconds.
func percentileSeries(r chartRow, p50, p90, p99 time.Duration) barSeries {
	s := barSeries{label: r.Strategy, color: r.color}
	for i, d := range []time.Duration{p50, p90, p99} {
		s.values = append(s.values, millis(d))
		s.titles = append(s.titles, fmt.Sprintf("%s %s: %s ms", r.Strategy, []string{"p50", "p90", "p99"}[i], msText(millis(d))))
	}
	return s
}

func sellingLatencyChart(rows []chartRow) (chart, bool) {
	var series []barSeries
	for _, r := range rowsWithSales(rows) {
		if r.Selling.Requests > 0 {
			series = append(series, percentileSeries(r, r.Selling.P50, r.Selling.P90, r.Selling.P99))
		}
	}
	return groupedBars("latency-selling", "Latency while selling", "ms (log scale)",
		"Percentiles of every attempt sent before the sale's last 201, busy answers included.", []string{"p50", "p90", "p99"}, series)
}

// soldOutLatencyChart is the latency of the sold-out answers: of the steady sold-out phase, with
// the bare handler beside it, when the run had one; else of each sale's tail after its last 201.
func soldOutLatencyChart(rows []chartRow) (chart, bool) {
	var steady, tail []barSeries
	var phase time.Duration
	for _, r := range rows {
		if s := r.Steady; s != nil && s.Skipped == "" && s.Requests > 0 {
			steady = append(steady, percentileSeries(r, s.P50, s.P90, s.P99))
			phase = s.Duration
		}
		if r.results != nil && r.SoldOut.Requests > 0 {
			tail = append(tail, percentileSeries(r, r.SoldOut.P50, r.SoldOut.P90, r.SoldOut.P99))
		}
	}
	if len(steady) > 0 {
		return groupedBars("latency-soldout", "Latency once sold out", "ms (log scale)",
			fmt.Sprintf("The steady sold-out phase: fresh buyers ordering each sold-out product for %s; "+
				"the bare handler is net/http alone answering the same requests.", phase.Round(time.Millisecond)),
			[]string{"p50", "p90", "p99"}, steady)
	}
	return groupedBars("latency-soldout", "Latency once sold out", "ms (log scale)",
		"The tail of each sale: its own requests sent after its last 201.", []string{"p50", "p90", "p99"}, tail)
}

// lockChart is the lock wait and hold times of every row, from the instances' lock histograms.
func lockChart(rows []chartRow) (chart, bool) {
	var series []barSeries
	var counts []string
	for _, r := range rows {
		l := r.Locks
		if l == nil || l.Wait.Count == 0 && l.Hold.Count == 0 {
			continue
		}
		s := barSeries{label: r.Strategy, color: r.color}
		for _, t := range []struct {
			name string
			scrape.LockTime
		}{{"wait", l.Wait}, {"hold", l.Hold}} {
			for _, v := range []struct {
				name string
				d    time.Duration
			}{{"mean", t.Mean}, {"p50", t.P50}, {"p99", t.P99}} {
				s.values = append(s.values, millis(v.d))
				s.titles = append(s.titles, fmt.Sprintf("%s %s %s: %s ms over %d", r.Strategy, t.name, v.name, msText(millis(v.d)), t.Count))
			}
		}
		series = append(series, s)
		counts = append(counts, fmt.Sprintf("%s %d/%d", r.Strategy, l.Wait.Count, l.Hold.Count))
	}
	return groupedBars("locks", "Lock wait and hold", "ms (log scale)",
		"From the instances' /metrics: the growth of seckill_lock_wait_seconds and seckill_lock_hold_seconds over each row, "+
			"summed over the instances. The mean is exact; p50 and p99 are interpolated within the buckets (each twice the last, "+
			"from 0.1 ms) as histogram_quantile does. One observation per lock acquisition, a batch of orders under group commit "+
			"(waits/holds: "+strings.Join(counts, ", ")+"). A row without bars recorded none: naive takes no lock, "+
			"and pessimistic's row lock lives inside its transaction, timed as wait only.",
		[]string{"wait: mean", "wait: p50", "wait: p99", "hold: mean", "hold: p50", "hold: p99"}, series)
}

// latencyScatters are one chart per row: the latency of every attempt over the sale's time,
// coloured by its outcome, on one latency scale for all rows.
func latencyScatters(rows []chartRow) []chart {
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		for _, res := range r.results {
			if v := millis(res.Latency); v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		return nil
	}
	var out []chart
	for _, r := range rows {
		out = append(out, latencyScatter(r, lo, hi))
	}
	return out
}

func latencyScatter(r chartRow, lo, hi float64) chart {
	byOutcome := map[string][]*vegeta.Result{}
	end := 0.0
	for _, res := range r.results {
		o := attack.Classify(res)
		byOutcome[o] = append(byOutcome[o], res)
		end = max(end, r.since(res.End()))
	}
	var legend []legendEntry
	for _, o := range outcomes {
		if n := len(byOutcome[o.name]); n > 0 {
			legend = append(legend, legendEntry{fmt.Sprintf("%s (%d)", o.name, n), o.color})
		}
	}
	c := newChart("scatter", r.Strategy+": latency of every request", legend, plotLeft, 240)
	c.Row = r.Strategy
	c.Swatch = &svgRect{X: chartLeft, Y: 11, W: 14, H: 14, Fill: r.color}
	c.Texts[0].X += 22
	x := linearScale(end*1.02, c.plot.X, c.plot.X+c.plot.W)
	y := logScale(lo, hi, c.bottom(), c.plot.Y)
	c.yAxis(y, "ms (log scale)")
	c.xAxis(x, "seconds since the sale's first request (when each attempt was sent)")
	if last := r.lastSale(); last >= 0 {
		lx := x.at(last)
		c.Axes = append(c.Axes, svgLine{X1: lx, Y1: c.plot.Y, X2: lx, Y2: c.bottom(), Class: "ref"})
		c.Texts = append(c.Texts, svgText{X: lx + 4, Y: c.plot.Y + 12, Text: fmt.Sprintf("last 201 answered at %.2f s", last), Class: "ref-label"})
	}
	// The most numerous outcome first, so that the rare ones (busy, errors) are drawn on top. Dots
	// closer than 2 units are drawn once: a sale of 40k requests stays a page of kilobytes.
	drawn := slices.SortedStableFunc(slices.Values(outcomes), func(a, b struct{ name, color string }) int {
		return cmp.Compare(len(byOutcome[b.name]), len(byOutcome[a.name]))
	})
	for _, o := range drawn {
		results := byOutcome[o.name]
		if len(results) == 0 {
			continue
		}
		seen := map[[2]int]bool{}
		var d strings.Builder
		for _, res := range results {
			px, py := x.at(r.since(res.Timestamp)), y.at(millis(res.Latency))
			cell := [2]int{int(px / 2), int(py / 2)}
			if seen[cell] {
				continue
			}
			seen[cell] = true
			fmt.Fprintf(&d, "M%s %sh0", svgNumber(px), svgNumber(py))
		}
		c.Paths = append(c.Paths, svgPath{D: d.String(), Stroke: o.color, Width: 3.5,
			Title: fmt.Sprintf("%s: %d attempts", o.name, len(results))})
	}
	c.Note = fmt.Sprintf("%d requests in %d attempts (a busy answer is retried after its Retry-After): each a dot at the time it was sent "+
		"and its latency, coloured by its outcome, from the answer's status and error code.", r.Requests, len(r.results))
	return *c
}
