package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Report is one experiment's run: what summary.json holds for it.
type Report struct {
	Name       string        `json:"name"`
	Seed       string        `json:"seed"`
	Claim      string        `json:"claim"`
	Fix        string        `json:"fix"`
	Result     Result        `json:"result"`
	Reproduced bool          `json:"reproduced"`
	Measures   bool          `json:"measurement,omitempty"` // a measurement: its claims are judged, nothing reproduced
	NotRun     string        `json:"not_run,omitempty"`     // why it could not run here
	Error      string        `json:"error,omitempty"`
	Took       time.Duration `json:"took_ns"`
}

// Verdict is the report's one word, and the parts of it that did not run.
func (r Report) Verdict() string {
	v := r.word()
	for _, p := range r.Result.NotRun {
		v += fmt.Sprintf("; its %s part not run (%s)", p.Name, p.Why)
	}
	return v
}

// Passed reports whether the report is what the lab is for: the failure reproduced beside its
// fix, or every figure of a measurement taken — and every part of it run.
func (r Report) Passed() bool {
	switch {
	case r.NotRun != "" || r.Error != "" || len(r.Result.NotRun) > 0:
		return false
	case r.Measures:
		return r.Result.Measured != nil && r.Result.Measured.Complete
	default:
		return r.Reproduced
	}
}

// word is the verdict of what ran.
func (r Report) word() string {
	switch m := r.Result.Measured; {
	case r.NotRun != "":
		return "not run"
	case r.Error != "":
		return "error"
	case r.Measures && (m == nil || !m.Complete):
		return "not measured: a figure is missing"
	case r.Measures:
		return fmt.Sprintf("measured: %d of %d claims held here", m.Held(), len(m.Claims))
	case r.Reproduced:
		return "reproduced"
	case !r.Result.Failing.Failed && r.Result.Fixed.Failed:
		return "not reproduced: the failure did not happen, and the fix did not hold"
	case !r.Result.Failing.Failed:
		return "not reproduced: the failure did not happen"
	default:
		return "not reproduced: the fix did not hold"
	}
}

// Run runs each experiment within bound, writing a progress line for each to progress.
func Run(ctx context.Context, env *Env, exps []Experiment, bound time.Duration, progress io.Writer) []Report {
	var out []Report
	for i, e := range exps {
		fmt.Fprintf(progress, "lab: [%d/%d] %s ...\n", i+1, len(exps), e.Name)
		r := Report{Name: e.Name, Seed: e.Seed, Claim: e.Claim, Fix: e.Fix, Measures: e.Measures}
		runCtx, cancel := context.WithTimeout(ctx, bound)
		start := time.Now()
		res, err := e.Run(runCtx, env)
		cancel()
		r.Took = time.Since(start)
		var notRun *NotRun
		switch {
		case errors.As(err, &notRun):
			r.NotRun = notRun.Why
		case err != nil:
			r.Error = err.Error()
		default:
			r.Result, r.Reproduced = res, res.Reproduced()
		}
		fmt.Fprintf(progress, "lab: [%d/%d] %s: %s in %.1f s\n", i+1, len(exps), e.Name, r.Verdict(), r.Took.Seconds())
		out = append(out, r)
	}
	return out
}

// Console is the terminal's table: one short line per experiment — its claim cut to its first
// clause, what its chart measures, the failing form's figure (the chart's first failed bar), the
// fix's (its last bar that held) and the verdict. The whole story of each stays in report.md
// and report.html: a console table whose cells run to paragraphs is one nobody reads.
func Console(reports []Report) string {
	var b strings.Builder
	b.WriteString("| experiment | claim | figure | failing form | fix | verdict |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range reports {
		c := r.Result.Chart
		failing, fixed := figure(c, true), figure(c, false)
		switch m := r.Result.Measured; {
		case r.NotRun != "" || r.Error != "":
			failing, fixed = "", ""
		case m != nil:
			failing, fixed = "", fmt.Sprintf("%d of %d claims held", m.Held(), len(m.Claims))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", r.Name, cell(short(r.Claim, consoleClaim)), cell(clip(c.Title, consoleFigure)),
			cell(failing), cell(fixed), cell(clip(r.Verdict(), consoleVerdict)))
	}
	return b.String()
}

// consoleClaim, consoleFigure and consoleVerdict bound a console cell, in characters.
const (
	consoleClaim   = 80
	consoleFigure  = 60
	consoleVerdict = 70
)

// figure is the value of the first bar of c that failed (failed), or of the last that held.
func figure(c Chart, failed bool) string {
	var found *Bar
	for i, b := range c.Bars {
		if b.Failed == failed {
			found = &c.Bars[i]
			if failed {
				break
			}
		}
	}
	if found == nil {
		return ""
	}
	v := fmt.Sprintf("%.3g", found.Value)
	if found.Value >= 100 {
		v = fmt.Sprintf("%.0f", found.Value)
	}
	return strings.TrimSpace(v + " " + c.Unit)
}

// short is s up to its first clause (a semicolon outside parentheses), clipped to n characters.
func short(s string, n int) string {
	depth := 0
	for i, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ';' && depth == 0:
			return clip(s[:i], n)
		}
	}
	return clip(s, n)
}

// clip cuts s at a word to at most n characters, marking the cut.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		s = string(r[:n])
		if i := strings.LastIndex(s, " "); i > n/2 {
			s = s[:i]
		}
		s += " …"
	}
	return s
}

// Markdown is the table of the reproductions, and one of the claims of each measurement.
func Markdown(reports []Report) string {
	var b strings.Builder
	b.WriteString("| experiment | source and claim | failing form: what happened | fix: what happened | verdict |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	var measurements []Report
	for _, r := range reports {
		if r.Measures {
			measurements = append(measurements, r)
			continue
		}
		failing, fixed := "", ""
		switch {
		case r.NotRun != "":
			failing = r.NotRun
		case r.Error != "":
			failing = "error: " + r.Error
		default:
			failing = fmt.Sprintf("**%s**: %s", r.Result.Failing.Form, r.Result.Failing.Happened)
			fixed = fmt.Sprintf("**%s**: %s", r.Result.Fixed.Form, r.Result.Fixed.Happened)
		}
		fmt.Fprintf(&b, "| `%s` | %s: %s | %s | %s | %s |\n", r.Name, cell(r.Seed), cell(r.Claim), cell(failing), cell(fixed), cell(r.Verdict()))
	}
	// A measurement has no failing form and no fix: its figures, then each claim on a line.
	for _, r := range measurements {
		fmt.Fprintf(&b, "\n`%s` — %s: %s\n\n", r.Name, r.Seed, r.Claim)
		switch m := r.Result.Measured; {
		case r.NotRun != "":
			fmt.Fprintf(&b, "Not run: %s\n\n", r.NotRun)
		case r.Error != "":
			fmt.Fprintf(&b, "Error: %s\n\n", r.Error)
		case m != nil:
			fmt.Fprintf(&b, "Measured, %s: %s\n\n", m.Method, m.Figures)
			b.WriteString("| claim | measured | figure | verdict |\n| --- | --- | --- | --- |\n")
			for _, j := range m.Claims {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(j.Claim), cell(j.Subject), cell(j.Measured), j.Verdict())
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "`%s`: %s\n", r.Name, r.Verdict())
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Verdict is the judgement's word.
func (j Judgement) Verdict() string {
	if j.Held {
		return "held"
	}
	return "contradicted"
}

// Summary is the last line: how many experiments reproduced and which did not, how many claims
// each measurement bore out, and the parts that did not run.
func Summary(reports []Report) string {
	var not, measured, parts []string
	n := 0
	for _, r := range reports {
		for _, p := range r.Result.NotRun {
			parts = append(parts, fmt.Sprintf("%s (%s)", r.Name, p.Name))
		}
		if r.Measures {
			measured = append(measured, r.Name+": "+strings.TrimPrefix(r.word(), "measured: "))
			continue
		}
		n++
		if !r.Reproduced {
			not = append(not, r.Name)
		}
	}
	out := fmt.Sprintf("lab: %d/%d experiments reproduced", n-len(not), n)
	if len(not) > 0 {
		out += "; not: " + strings.Join(not, ", ")
	}
	for _, m := range measured {
		out += "; " + m
	}
	if len(parts) > 0 {
		out += "; parts not run: " + strings.Join(parts, ", ")
	}
	return out
}

// Check is nil when every report passed; else an error that names the rest and why. A part
// that could not run here is a failure too: what the lab did not run, it did not show.
func Check(reports []Report) error {
	var problems []string
	for _, r := range reports {
		if r.Passed() {
			continue
		}
		switch {
		case r.NotRun != "":
			problems = append(problems, r.Name+" not run: "+r.NotRun)
		case r.Error != "":
			problems = append(problems, r.Name+": error: "+r.Error)
		default:
			problems = append(problems, r.Name+": "+r.Verdict())
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

// Write writes report.md, report.html and summary.json into dir. provenance, the line that
// says which command, commit and machine produced the figures, heads report.md.
func Write(dir, provenance string, reports []Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	md := "# seckill lab\n\n" + provenance + "\n\n" + Markdown(reports) + "\n" + Summary(reports) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	sum := struct {
		Reports     []Report `json:"experiments"`
		Reproduced  int      `json:"reproduced"`   // of the experiments that reproduce a failure
		Total       int      `json:"total"`        // experiments that reproduce a failure, measurements aside
		ClaimsHeld  int      `json:"claims_held"`  // of the measurements' claims
		ClaimsTotal int      `json:"claims_total"` // claims judged
		NotRun      []string `json:"not_run"`      // experiments, and parts of them, that did not run
	}{Reports: reports, NotRun: []string{}}
	for _, r := range reports {
		if r.NotRun != "" {
			sum.NotRun = append(sum.NotRun, r.Name)
		}
		for _, p := range r.Result.NotRun {
			sum.NotRun = append(sum.NotRun, r.Name+" ("+p.Name+")")
		}
		if m := r.Result.Measured; m != nil {
			sum.ClaimsHeld += m.Held()
			sum.ClaimsTotal += len(m.Claims)
		}
		if r.Measures {
			continue
		}
		sum.Total++
		if r.Reproduced {
			sum.Reproduced++
		}
	}
	js, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), js, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	defer f.Close()
	return page.Execute(f, reports)
}

// Colours of a chart's bars: where the failure happened, and where the fix held.
var (
	failedColor = color.RGBA{R: 0xcf, G: 0x22, B: 0x2e, A: 0xff}
	heldColor   = color.RGBA{R: 0x1a, G: 0x7f, B: 0x37, A: 0xff}
)

// SVG is the chart drawn by gonum/plot, for the page: a bar per value, the first on top, each
// named on the left and with its value beside it.
func (c Chart) SVG() template.HTML {
	n := len(c.Bars)
	if n == 0 {
		return ""
	}
	sans := font.Font{Typeface: "Liberation", Variant: "Sans"}
	p := plot.New()
	p.X.Label.Text = c.Unit
	p.X.Label.TextStyle.Font, p.X.Tick.Label.Font = font.From(sans, 12), font.From(sans, 11)
	p.Y.Tick.Label.Font = font.From(sans, 12)
	names := make([]string, n)
	values := &plotter.Labels{Offset: vg.Point{X: 6}}
	top := 0.0
	for i, b := range c.Bars {
		y := float64(n - 1 - i)
		names[n-1-i] = b.Label
		colour := heldColor
		if b.Failed {
			colour = failedColor
		}
		// Outlined in its own colour, so that a bar of 0 still shows which it is.
		p.Add(&plotter.BarChart{Values: plotter.Values{b.Value}, XMin: y, Width: vg.Points(18), Color: colour, Horizontal: true,
			LineStyle: draw.LineStyle{Color: colour, Width: vg.Points(2)}})
		values.XYs = append(values.XYs, plotter.XY{X: b.Value, Y: y})
		values.Labels = append(values.Labels, strings.TrimSpace(fmt.Sprintf("%.3g %s", b.Value, c.Unit)))
		values.TextStyle = append(values.TextStyle, text.Style{Font: font.From(sans, 12), YAlign: draw.YCenter, Handler: plot.DefaultTextHandler})
		top = max(top, b.Value)
	}
	p.Add(values)
	p.NominalY(names...)
	p.X.Min, p.X.Max, p.X.Padding = 0, top, 0
	if top <= 0 {
		p.X.Max = 1
	}
	p.Y.Min, p.Y.Max = -0.5, float64(n)-0.5
	canvas := vgsvg.New(760, vg.Length(36*n+50))
	p.Draw(draw.New(canvas))
	var b strings.Builder
	_, _ = canvas.WriteTo(&b) // a strings.Builder does not fail
	// vgsvg heads a file of its own (<?xml ...?>, a comment): the page takes the element alone.
	// gonum escapes the text it writes.
	svg := b.String()
	return template.HTML(svg[strings.Index(svg, "<svg"):])
}

var page = template.Must(template.New("lab").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>seckill lab</title>
<style>
body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
section{border-top:1px solid #ddd;padding:1em 0}
.verdict{font-weight:bold}.ok{color:#1a7f37}.bad{color:#cf222e}
code{background:#f3f3f3;padding:0 .2em}
figure svg{display:block;width:100%;height:auto}
svg text{font-family:"Liberation Sans",Arimo,Arial,Helvetica,sans-serif !important}
</style></head><body>
<h1>seckill lab: the failures locks exist for, each beside its fix</h1>
{{range .}}<section id="{{.Name}}">
<h2>{{.Name}} <span class="verdict {{if .Passed}}ok{{else}}bad{{end}}">{{.Verdict}}</span></h2>
<p><b>{{.Seed}}</b>: {{.Claim}}</p>
{{if .NotRun}}<p>Not run here: {{.NotRun}}</p>{{else if .Error}}<p>Error: {{.Error}}</p>{{else}}
{{with .Result.Measured}}<p>Measured, <b>{{.Method}}</b>: {{.Figures}}</p>
<ul>{{range .Claims}}<li><span class="verdict {{if .Held}}ok{{else}}bad{{end}}">{{.Verdict}}</span>: {{.Claim}} — {{.Subject}}, {{.Measured}}</li>
{{end}}</ul>{{else}}
<p>Failing form, <b>{{.Result.Failing.Form}}</b>: {{.Result.Failing.Happened}}</p>
<p>Fix, <b>{{.Result.Fixed.Form}}</b>: {{.Result.Fixed.Happened}}</p>
<p>The line that makes the difference: <code>{{.Fix}}</code></p>{{end}}
{{range .Result.NotRun}}<p class="verdict bad">Its {{.Name}} part did not run: {{.Why}}</p>
{{end}}
<figure><figcaption>{{.Result.Chart.Title}}</figcaption>
{{.Result.Chart.SVG}}</figure>{{end}}
</section>
{{end}}</body></html>
`))
