package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is one experiment's run: what summary.json holds for it.
type Report struct {
	Name       string        `json:"name"`
	Seed       string        `json:"seed"`
	Claim      string        `json:"claim"`
	Fix        string        `json:"fix"`
	Result     Result        `json:"result"`
	Reproduced bool          `json:"reproduced"`
	NotRun     string        `json:"not_run,omitempty"` // why it could not run here
	Error      string        `json:"error,omitempty"`
	Took       time.Duration `json:"took_ns"`
}

// Verdict is the report's one word.
func (r Report) Verdict() string {
	switch {
	case r.NotRun != "":
		return "not run"
	case r.Error != "":
		return "error"
	case r.Reproduced:
		return "reproduced"
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
		r := Report{Name: e.Name, Seed: e.Seed, Claim: e.Claim, Fix: e.Fix}
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

// Markdown is the table of the reports.
func Markdown(reports []Report) string {
	var b strings.Builder
	b.WriteString("| experiment | seed and claim | failing form: what happened | fix: what happened | verdict |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range reports {
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
		fmt.Fprintf(&b, "| `%s` | %s: %s | %s | %s | %s |\n", r.Name, cell(r.Seed), cell(r.Claim), cell(failing), cell(fixed), r.Verdict())
	}
	return b.String()
}

// Summary is the last line: how many reproduced, and which did not.
func Summary(reports []Report) string {
	var not []string
	for _, r := range reports {
		if !r.Reproduced {
			not = append(not, r.Name)
		}
	}
	n := len(reports)
	if len(not) == 0 {
		return fmt.Sprintf("lab: %d/%d experiments reproduced", n, n)
	}
	return fmt.Sprintf("lab: %d/%d experiments reproduced; not: %s", n-len(not), n, strings.Join(not, ", "))
}

// Write writes report.md, report.html and summary.json into dir.
func Write(dir string, reports []Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	md := "# seckill lab\n\n" + Markdown(reports) + "\n" + Summary(reports) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(struct {
		Reports    []Report `json:"experiments"`
		Reproduced int      `json:"reproduced"`
		Total      int      `json:"total"`
	}{reports, countReproduced(reports), len(reports)}, "", "  ")
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

func countReproduced(reports []Report) int {
	n := 0
	for _, r := range reports {
		if r.Reproduced {
			n++
		}
	}
	return n
}

// barRow is one bar of a chart laid out in SVG: its label above it, its width scaled to the
// largest value of the chart, its value beside it.
type barRow struct {
	Label, Value string
	Y, Width     int
	Failed       bool
}

// Rows lays the chart out, one row per bar.
func (c Chart) Rows() []barRow {
	top := 0.0
	for _, b := range c.Bars {
		top = max(top, b.Value)
	}
	rows := make([]barRow, len(c.Bars))
	for i, b := range c.Bars {
		w := 0
		if top > 0 {
			w = int(b.Value / top * 560)
		}
		rows[i] = barRow{Label: b.Label, Value: strings.TrimSpace(fmt.Sprintf("%.3g %s", b.Value, c.Unit)), Y: 4 + i*42, Width: max(w, 2), Failed: b.Failed}
	}
	return rows
}

// Height is the SVG height of the chart.
func (c Chart) Height() int { return 10 + len(c.Bars)*42 }

var page = template.Must(template.New("lab").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>seckill lab</title>
<style>
body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
section{border-top:1px solid #ddd;padding:1em 0}
.verdict{font-weight:bold}.ok{color:#1a7f37}.bad{color:#cf222e}
code{background:#f3f3f3;padding:0 .2em}
svg text{font-size:12px}
</style></head><body>
<h1>seckill lab: the failures locks exist for, each beside its fix</h1>
{{range .}}<section id="{{.Name}}">
<h2>{{.Name}} <span class="verdict {{if .Reproduced}}ok{{else}}bad{{end}}">{{.Verdict}}</span></h2>
<p><b>{{.Seed}}</b>: {{.Claim}}</p>
{{if .NotRun}}<p>Not run here: {{.NotRun}}</p>{{else if .Error}}<p>Error: {{.Error}}</p>{{else}}
<p>Failing form, <b>{{.Result.Failing.Form}}</b>: {{.Result.Failing.Happened}}</p>
<p>Fix, <b>{{.Result.Fixed.Form}}</b>: {{.Result.Fixed.Happened}}</p>
<p>The line that makes the difference: <code>{{.Fix}}</code></p>
<figure><figcaption>{{.Result.Chart.Title}}</figcaption>
<svg class="chart" width="760" height="{{.Result.Chart.Height}}" role="img" aria-label="{{.Result.Chart.Title}}">
{{range .Result.Chart.Rows}}<text x="0" y="{{.Y}}" dy="12">{{.Label}}</text>
<rect x="0" y="{{.Y}}" transform="translate(0,16)" width="{{.Width}}" height="18" fill="{{if .Failed}}#cf222e{{else}}#1a7f37{{end}}"></rect>
<text x="{{.Width}}" dx="6" y="{{.Y}}" dy="30">{{.Value}}</text>
{{end}}</svg></figure>{{end}}
</section>
{{end}}</body></html>
`))
