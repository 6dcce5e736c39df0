package report

import (
	"cmp"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/flashsale/seckill/loadtest/attack"
	"github.com/flashsale/seckill/loadtest/scrape"
)

// The charts of report.html are drawn by gonum/plot and written as SVG by its vgsvg canvas,
// inline in the page: the page carries no script and loads nothing, so it reads the same on a
// machine without a network and renders the same in the test's headless Chromium. A chart is
// two SVGs side by side, its plot and its legend, on one scale: the legend never hides data.
const (
	chartWidth = 1160.0 // points, plot and legend together: the page scales them to its width
	legendGap  = 14.0   // points between the plot and its legend
)

// sans is the charts' typeface (Liberation Sans, which gonum/plot carries to measure text).
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

func rgb(v uint32) color.RGBA {
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}
}

// rowPalette colours the rows that sold, in the order of the report, the same in every chart.
// The reference rows (the SQL baseline, the bare handler) are grey.
var rowPalette = []color.Color{rgb(0x4e79a7), rgb(0xf28e2b), rgb(0x59a14f), rgb(0xe15759), rgb(0xb07aa1), rgb(0x17becf),
	rgb(0x9c755f), rgb(0xd37295), rgb(0x8c8c00), rgb(0x1f3b73), rgb(0xa0522d), rgb(0x2f8f6f)}

var (
	baselineColor = rgb(0x6f6f6f)
	bareColor     = rgb(0xb5b0ab)
	gridColor     = rgb(0xe8e8e8)
	textColor     = rgb(0x222222)
	// refLine marks the stock and the last sale, under the data.
	refLine = draw.LineStyle{Color: rgb(0x888888), Width: vg.Points(1.2), Dashes: []vg.Length{vg.Points(6), vg.Points(4)}}
)

// outcomes are the outcomes of classify in the order the latency charts list them, each with its
// colour in every chart.
var outcomes = []struct {
	name  string
	color color.Color
}{
	{attack.OK, rgb(0x2ca02c)},
	{attack.Queued, rgb(0x1f77b4)},
	{attack.SoldOut, rgb(0x98a2ad)},
	{attack.Busy, rgb(0xff7f0e)},
	{attack.AlreadyPurchased, rgb(0x9467bd)},
	{attack.Invalid, rgb(0x8c564b)},
	{attack.Unavailable, rgb(0xe377c2)},
	{attack.OtherClient, rgb(0xbcbd22)},
	{attack.ServerError, rgb(0xd62728)},
	{attack.Transport, rgb(0x111111)},
}

// chart is one chart of report.html: its plot and its legend as SVG, and the words around them.
type chart struct {
	ID     string // data-chart: what the chart shows (the page's test finds charts by it)
	Row    string // data-row: the row of a chart of one row
	Title  string
	Swatch string // the row's colour (CSS) beside the title of a chart of one row
	Note   string // under the chart: what the figures are and where they come from
	Plot   template.HTML
	Legend template.HTML
	// The widths of the two SVGs in points: the page gives each its share, so both have one scale.
	PlotWidth, LegendWidth float64
}

// newPlot is a plot in the report's style: sans-serif text, the axes' titles, and no gap
// between an axis and the data, so that a bar stands on its axis.
func newPlot(xTitle, yTitle string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = xTitle, yTitle
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, 12)
		a.Tick.Label.Font = font.From(sans, 11)
		a.Tick.Marker = plainTicks{}
		a.Padding = 0
	}
	return p
}

// plainTicks are gonum's default ticks, labelled without trailing zeros: 250, not 250.00.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = tickLabel(t.Value)
		}
	}
	return ticks
}

// grid is the light grid under the data, along the ticks of the axes asked for.
func grid(vertical, horizontal bool) *plotter.Grid {
	g := &plotter.Grid{}
	line := draw.LineStyle{Color: gridColor, Width: vg.Points(1)}
	if vertical {
		g.Vertical = line
	}
	if horizontal {
		g.Horizontal = line
	}
	return g
}

// newLegend is a legend in the report's style: its entries from the top down.
func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font = font.From(sans, 12)
	l.Top, l.Left = true, true
	l.ThumbnailWidth = vg.Points(16)
	l.Padding = vg.Points(5)
	return l
}

// swatch is a legend's square of c, the thumbnail of a bar.
func swatch(c color.Color) plot.Thumbnailer { return &plotter.BarChart{Color: c} }

// plotWidth is what is left of the chart's width to the plot beside l.
func plotWidth(l plot.Legend) vg.Length {
	return vg.Points(chartWidth) - l.Rectangle(draw.Canvas{}).Size().X - vg.Points(legendGap)
}

// dataArea is the size of p's data area, drawn height high beside l: how wide a bar can be,
// how close two dots.
func dataArea(p *plot.Plot, l plot.Legend, height vg.Length) vg.Point {
	return p.DataCanvas(draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: plotWidth(l), Y: height}}}).Size()
}

// render lays p out height high and l beside it, as wide as its longest entry.
func (c *chart) render(p *plot.Plot, l plot.Legend, height vg.Length) {
	pw := plotWidth(l)
	lw := vg.Points(chartWidth) - pw
	c.Plot = svgOf(pw, height, p.Draw)
	c.Legend = svgOf(lw, max(height, l.Rectangle(draw.Canvas{}).Size().Y+4), func(dc draw.Canvas) {
		l.Draw(draw.Crop(dc, vg.Points(legendGap), 0, 0, -4))
	})
	c.PlotWidth, c.LegendWidth = pw.Points(), lw.Points()
}

// svgOf is what drawOn draws on a canvas of w × h points, as an SVG element of the page.
func svgOf(w, h vg.Length, drawOn func(draw.Canvas)) template.HTML {
	canvas := vgsvg.New(w, h)
	drawOn(draw.New(canvas))
	var b strings.Builder
	_, _ = canvas.WriteTo(&b) // a strings.Builder does not fail
	// vgsvg heads a file of its own (<?xml ...?>, a comment): the page takes the element alone.
	// gonum escapes the text it writes.
	s := b.String()
	return template.HTML(s[strings.Index(s, "<svg"):])
}

// linearAxis runs a from 0 to hi, or to 1 when there is nothing to show.
func linearAxis(a *plot.Axis, hi float64) {
	a.Min, a.Max = 0, hi
	if hi <= 0 {
		a.Max = 1
	}
}

// logAxis puts a on a scale by decades over the whole decades around lo and hi (both above
// 0): latencies span from tenths of a millisecond to seconds, and the fast rows must stay
// readable beside the slow ones.
func logAxis(a *plot.Axis, lo, hi float64) {
	a.Min, a.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if a.Max <= a.Min {
		a.Max = a.Min * 10
	}
	a.Scale, a.Tick.Marker = floorLog{}, decadeTicks{}
}

// floorLog is gonum's log scale with what lies below the axis at its bottom: a bar's base, 0,
// which gonum's own scale refuses.
type floorLog struct{}

func (floorLog) Normalize(min, max, x float64) float64 {
	return plot.LogScale{}.Normalize(min, max, math.Max(x, min))
}

// decadeTicks are gonum's log ticks, with 2 and 5 labelled too when the axis spans three
// decades or fewer, every label rounded (0.05, not 0.05000000000000001).
type decadeTicks struct{}

func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.LogTicks{}.Ticks(min, max)
	few := max/min <= 1000*1.001
	for i, t := range ticks {
		m := math.Round(t.Value / math.Pow(10, math.Floor(math.Log10(t.Value)+1e-9)))
		if t.Label != "" || few && (m == 2 || m == 5) {
			ticks[i].Label = tickLabel(t.Value)
		}
	}
	return ticks
}

func tickLabel(v float64) string { return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64) }

// labels are texts at points of the data, offset by off.
func labels(at plotter.XYs, texts []string, x draw.XAlignment, y draw.YAlignment, off vg.Point) *plotter.Labels {
	sty := text.Style{Color: textColor, Font: font.From(sans, 11), XAlign: x, YAlign: y, Handler: plot.DefaultTextHandler}
	styles := make([]text.Style, len(texts))
	for i := range styles {
		styles[i] = sty
	}
	return &plotter.Labels{XYs: at, Labels: texts, TextStyle: styles, Offset: off}
}

// cssColor is c as the page's CSS writes it.
func cssColor(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
}

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
	color   color.Color
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

// countLine is a count over time: times sorted, in seconds, the count rising by one at each.
func countLine(times []float64, style draw.LineStyle) *plotter.Line {
	xys := plotter.XYs{{}}
	// At most about 600 vertices a line: a 40k-unit sale would otherwise weigh megabytes.
	step := max(1, len(times)/600)
	for j := step - 1; j < len(times); j += step {
		xys = append(xys, plotter.XY{X: times[j], Y: float64(j + 1)})
	}
	if n := len(times); n > 0 && (n-1)%step != step-1 {
		xys = append(xys, plotter.XY{X: times[n-1], Y: float64(n)})
	}
	return &plotter.Line{XYs: xys, LineStyle: style}
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
	p := newPlot("seconds since the sale's first request", "units sold (201s)")
	p.Add(grid(true, true))
	linearAxis(&p.X, end*1.03)
	linearAxis(&p.Y, float64(max(int64(most), stock))*1.05)
	if stock > 0 {
		line := plotter.XYs{{X: p.X.Min, Y: float64(stock)}, {X: p.X.Max, Y: float64(stock)}}
		p.Add(&plotter.Line{XYs: line, LineStyle: refLine},
			labels(line[1:], []string{fmt.Sprintf("stock %d", stock)}, draw.XRight, draw.YBottom, vg.Point{X: -4, Y: 4}))
	}
	l := newLegend()
	for i, r := range rows {
		line := countLine(sold[i], draw.LineStyle{Color: r.color, Width: vg.Points(2.5)})
		p.Add(line)
		thumbs := []plot.Thumbnailer{line}
		if n := len(sold[i]); n > 0 {
			last := &plotter.Scatter{XYs: plotter.XYs{{X: sold[i][n-1], Y: float64(n)}},
				GlyphStyle: draw.GlyphStyle{Color: r.color, Radius: vg.Points(4.5), Shape: draw.CircleGlyph{}}}
			p.Add(last)
			thumbs = append(thumbs, last)
		}
		l.Add(r.Strategy, thumbs...)
	}
	c := chart{ID: "units", Title: "Units sold over time",
		Note: "Each line is one row's sale: its 201s counted by the time they were answered (retried busy answers included), " +
			"from the sale's first request; the dot is its last sale. A line above the stock oversold."}
	c.render(p, l, 340)
	return c, true
}

// Colours of the queue chart's two lines.
var (
	acceptedColor = rgb(0x4e79a7)
	placedColor   = rgb(0x59a14f)
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
		p := newPlot("seconds since the sale's first request", "units")
		p.Add(grid(true, true))
		linearAxis(&p.X, end*1.03)
		linearAxis(&p.Y, float64(len(accepted))*1.05)
		a := countLine(accepted, draw.LineStyle{Color: acceptedColor, Width: vg.Points(2.5)})
		pl := countLine(placed, draw.LineStyle{Color: placedColor, Width: vg.Points(2.5)})
		p.Add(a, pl)
		l := newLegend()
		l.Add(fmt.Sprintf("accepted, 202 (%d)", len(accepted)), a)
		l.Add(fmt.Sprintf("placed (%d)", len(placed)), pl)
		c := chart{ID: "queue", Row: r.Strategy, Title: r.Strategy + ": units accepted and placed over time", Swatch: cssColor(r.color),
			Note: fmt.Sprintf("Each 202 counted when it was answered, and again when a client polling its order saw it placed; "+
				"the gap between the lines is the queue. %d rejected, %d never ended; 202 to final state p50 %s ms, p99 %s ms.",
				r.Queue.Rejected, r.Queue.Unended, Milliseconds(r.Queue.EndP50), Milliseconds(r.Queue.EndP99))}
		c.render(p, l, 280)
		out = append(out, c)
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
	const band = 30.0 // points a row
	n := len(rows)
	p := newPlot("orders/s (201s over the selling phase)", "")
	p.Add(grid(true, false))
	l := newLegend()
	names := make([]string, n)
	var at plotter.XYs
	var texts []string
	most := 0.0
	for i, r := range rows {
		y := float64(n - 1 - i) // the first row on top
		names[n-1-i] = r.Strategy
		bar := &plotter.BarChart{Values: plotter.Values{r.OrdersPerSecond}, XMin: y, Width: vg.Points(band - 10), Color: r.color, Horizontal: true}
		p.Add(bar)
		l.Add(r.Strategy, bar)
		text := fmt.Sprintf("%.0f", r.OrdersPerSecond)
		if r.VsBaseline > 0 {
			text += fmt.Sprintf(" (%.2fx baseline)", r.VsBaseline)
		}
		if r.Verdict.Oversold > 0 {
			text += fmt.Sprintf(", oversold by %d", r.Verdict.Oversold)
		}
		at = append(at, plotter.XY{X: r.OrdersPerSecond, Y: y})
		texts = append(texts, text)
		most = max(most, r.OrdersPerSecond)
	}
	p.Add(labels(at, texts, draw.XLeft, draw.YCenter, vg.Point{X: 6}))
	p.NominalY(names...)
	linearAxis(&p.X, most*1.3)
	p.Y.Min, p.Y.Max = -0.5, float64(n)-0.5
	c := chart{ID: "orders", Title: "Orders per second while selling",
		Note: "Orders answered 201 over the selling phase (from the first request to the last 201). " +
			"The baseline is the per-order SELECT ... FOR UPDATE transaction in SQL, without HTTP."}
	c.render(p, l, vg.Points(band*float64(n)+60))
	return c, true
}

// barSeries is one row of a grouped bar chart: a value per group, 0 for none.
type barSeries struct {
	label  string
	color  color.Color
	values []float64
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
	const height = 320
	p := newPlot("", yTitle)
	p.Add(grid(false, true))
	logAxis(&p.Y, lo, hi)
	p.NominalX(groups...)
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	l := newLegend()
	for _, s := range series {
		l.Add(s.label, swatch(s.color))
	}
	bar := dataArea(p, l, height).X / vg.Length(len(groups)) * 0.8 / vg.Length(len(series))
	decades := [2]float64{p.Y.Min, p.Y.Max}
	for i, s := range series {
		offset := bar * vg.Length(float64(i)-float64(len(series)-1)/2)
		var at plotter.XYs
		var texts []string
		for g, v := range s.values {
			if v <= 0 {
				continue
			}
			p.Add(&plotter.BarChart{Values: plotter.Values{v}, XMin: float64(g), Offset: offset, Width: bar - 2, Color: s.color})
			at = append(at, plotter.XY{X: float64(g), Y: v})
			texts = append(texts, msText(v))
		}
		if bar >= 28 {
			p.Add(labels(at, texts, draw.XCenter, draw.YBottom, vg.Point{X: offset, Y: 3}))
		}
	}
	// A bar's base, 0, stretched the axis: back to the decades.
	p.Y.Min, p.Y.Max = decades[0], decades[1]
	c := chart{ID: id, Title: title, Note: note}
	c.render(p, l, height)
	return c, true
}

// percentileSeries is a row's p50, p90 and p99 in milliseconds.
func percentileSeries(r chartRow, p50, p90, p99 time.Duration) barSeries {
	return barSeries{label: r.Strategy, color: r.color, values: []float64{millis(p50), millis(p90), millis(p99)}}
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
		for _, t := range []scrape.LockTime{l.Wait, l.Hold} {
			s.values = append(s.values, millis(t.Mean), millis(t.P50), millis(t.P99))
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
	const height = 280
	p := newPlot("seconds since the sale's first request (when each attempt was sent)", "ms (log scale)")
	p.Add(grid(true, true))
	linearAxis(&p.X, end*1.02)
	logAxis(&p.Y, lo, hi)
	if last := r.lastSale(); last >= 0 {
		line := plotter.XYs{{X: last, Y: p.Y.Max}, {X: last, Y: p.Y.Min}}
		p.Add(&plotter.Line{XYs: line, LineStyle: refLine},
			labels(line[:1], []string{fmt.Sprintf("last 201 answered at %.2f s", last)}, draw.XLeft, draw.YTop, vg.Point{X: 4, Y: -4}))
	}
	l := newLegend()
	for _, o := range outcomes {
		if n := len(byOutcome[o.name]); n > 0 {
			l.Add(fmt.Sprintf("%s (%d)", o.name, n), &plotter.Scatter{GlyphStyle: draw.GlyphStyle{Color: o.color, Radius: vg.Points(5), Shape: draw.CircleGlyph{}}})
		}
	}
	// Dots closer than a dot's width are drawn once: a sale of 40k requests stays a chart of
	// hundreds of kilobytes, not megabytes. The cells are in the data's units: seconds, decades.
	dot := draw.GlyphStyle{Radius: vg.Points(1.75), Shape: draw.CircleGlyph{}}
	area := dataArea(p, l, height)
	cellX := (p.X.Max - p.X.Min) / float64(area.X/(2*dot.Radius))
	cellY := math.Log10(p.Y.Max/p.Y.Min) / float64(area.Y/(2*dot.Radius))
	// The most numerous outcome first, so that the rare ones (busy, errors) are drawn on top.
	drawn := slices.SortedStableFunc(slices.Values(outcomes), func(a, b struct {
		name  string
		color color.Color
	}) int {
		return cmp.Compare(len(byOutcome[b.name]), len(byOutcome[a.name]))
	})
	for _, o := range drawn {
		seen := map[[2]int]bool{}
		var dots plotter.XYs
		for _, res := range byOutcome[o.name] {
			x, y := r.since(res.Timestamp), millis(res.Latency)
			cell := [2]int{int(x / cellX), int(math.Log10(max(y, lo)) / cellY)}
			if !seen[cell] {
				seen[cell] = true
				dots = append(dots, plotter.XY{X: x, Y: y})
			}
		}
		if len(dots) > 0 {
			dot.Color = o.color
			p.Add(&plotter.Scatter{XYs: dots, GlyphStyle: dot})
		}
	}
	c := chart{ID: "scatter", Row: r.Strategy, Title: r.Strategy + ": latency of every request", Swatch: cssColor(r.color),
		Note: fmt.Sprintf("%d requests in %d attempts (a busy answer is retried after its Retry-After): each a dot at the time it was sent "+
			"and its latency, coloured by its outcome, from the answer's status and error code.", r.Requests, len(r.results))}
	c.render(p, l, height)
	return c
}
