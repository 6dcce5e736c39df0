package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"
)

// families are the lock families of the classic comparison, by strategy.
var families = map[string]string{
	"hybrid":      "Redis lock + admission, DB version check",
	"etcd":        "etcd lease + fencing token",
	"pessimistic": "DB row lock (FOR UPDATE NOWAIT)",
	"dblock":      "DB lock table",
	"naive":       "none (unsafe on purpose)",
}

// report is one strategy's sale, measured and verified.
type report struct {
	Strategy        string         `json:"strategy"`
	Family          string         `json:"family"`
	SKU             string         `json:"sku"`
	Requests        int            `json:"requests"`
	Attempts        int            `json:"attempts"`
	Outcomes        map[string]int `json:"outcomes"`
	BusyAnswers     int            `json:"busy_answers"`
	OrdersPerSecond float64        `json:"orders_per_second"`
	VsBaseline      float64        `json:"vs_baseline,omitempty"` // orders/s over the baseline's, same run
	Selling         phase          `json:"selling"`
	SoldOut         phase          `json:"sold_out"`
	Verdict         verdict        `json:"verdict"`
	ExpectOversell  bool           `json:"expect_oversell"`
	Skipped         string         `json:"skipped,omitempty"`
	Failed          []string       `json:"failed,omitempty"` // why this run fails the tool
}

// newReport measures a sale. The verdict is added by the caller.
func newReport(strategy, sku string, s sale) report {
	r := report{Strategy: strategy, Family: families[strategy], SKU: sku, Requests: len(s.final), Attempts: len(s.results),
		Outcomes: map[string]int{}, ExpectOversell: strategy == "naive"}
	if r.Family == "" {
		r.Family = "server default"
	}
	for _, res := range s.final {
		r.Outcomes[classify(res)]++
	}
	for _, res := range s.results {
		if classify(res) == outcomeBusy {
			r.BusyAnswers++
		}
	}
	selling, soldOut := split(s.results)
	r.Selling, r.SoldOut = newPhase(selling), newPhase(soldOut)
	r.OrdersPerSecond = ordersPerSecond(selling)
	return r
}

// judge decides whether the run passes: a safe strategy must keep the invariant and never answer
// 5xx; the unsafe one must be caught overselling, or the checks are blind.
func (r *report) judge() {
	if r.Skipped != "" {
		return
	}
	if n := r.Outcomes[outcomeServerError]; n > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d requests answered 5xx", n))
	}
	if r.ExpectOversell {
		if r.Verdict.Oversold == 0 {
			r.Failed = append(r.Failed, "naive did not oversell: the load did not race, or the checks are blind")
		}
		return
	}
	r.Failed = append(r.Failed, r.Verdict.Problems...)
}

func (r report) verdictText() string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case len(r.Failed) > 0:
		return "FAIL: " + strings.Join(r.Failed, "; ")
	case r.ExpectOversell:
		return fmt.Sprintf("oversold by %d, caught as expected", r.Verdict.Oversold)
	}
	return "invariant holds"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

// markdown writes the comparison table.
func markdown(w io.Writer, reports []report) {
	fmt.Fprintln(w, "| strategy | lock | orders | orders/s (selling) | vs baseline | p50 / p99 ms (selling) | busy answers | sold-out req/s | sold-out p99 ms | oversold | verdict |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range reports {
		if r.Skipped != "" {
			fmt.Fprintf(w, "| `%s` | %s | | | | | | | | | %s |\n", r.Strategy, r.Family, r.verdictText())
			continue
		}
		busy := 0.0
		if r.Attempts > 0 {
			busy = 100 * float64(r.BusyAnswers) / float64(r.Attempts)
		}
		vs := ""
		if r.VsBaseline > 0 {
			vs = fmt.Sprintf("%.2fx", r.VsBaseline)
		}
		fmt.Fprintf(w, "| `%s` | %s | %d | %.0f | %s | %s / %s | %d (%.0f%%) | %.0f | %s | %d | %s |\n",
			r.Strategy, r.Family, r.Outcomes[outcomeOK], r.OrdersPerSecond, vs, ms(r.Selling.P50), ms(r.Selling.P99),
			r.BusyAnswers, busy, r.SoldOut.Throughput, ms(r.SoldOut.P99), r.Verdict.Oversold, r.verdictText())
	}
}

var htmlReport = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>seckill load test</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}
iframe{width:100%;height:480px;border:0}</style></head><body>
<h1>seckill load test</h1>
<p>{{.Description}}</p>
<table><tr><th>strategy</th><th>lock</th><th>orders</th><th>orders/s (selling)</th><th>p50 / p99 ms (selling)</th>
<th>busy answers</th><th>sold-out req/s</th><th>oversold</th><th>verdict</th></tr>
{{range .Reports}}<tr><td>{{.Strategy}}</td><td>{{.Family}}</td><td>{{index .Outcomes "ok"}}</td><td>{{printf "%.0f" .OrdersPerSecond}}</td>
<td>{{.Selling.P50}} / {{.Selling.P99}}</td><td>{{.BusyAnswers}}</td><td>{{printf "%.0f" .SoldOut.Throughput}}</td>
<td>{{.Verdict.Oversold}}</td><td>{{.VerdictText}}</td></tr>
{{end}}</table>
{{range .Reports}}{{if not .Skipped}}<h2>{{.Strategy}}: latency over time</h2><iframe src="plot-{{.Strategy}}.html"></iframe>{{end}}{{end}}
</body></html>
`))

// write saves the report files in dir: report.md, report.html with a latency plot per strategy,
// summary.json, and every result of every strategy as JSON lines (results-<strategy>.json).
func write(dir, description string, reports []report, sales map[string]sale) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# seckill load test\n\n%s\n\n", description)
	markdown(&md, reports)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	type row struct {
		report
		VerdictText string
	}
	rows := make([]row, len(reports))
	for i, r := range reports {
		rows[i] = row{r, r.verdictText()}
	}
	if err := writeFile(filepath.Join(dir, "report.html"), func(w io.Writer) error {
		return htmlReport.Execute(w, map[string]any{"Description": description, "Reports": rows})
	}); err != nil {
		return err
	}
	for name, s := range sales {
		p := plot.New(plot.Title(name+": latency over time"), plot.Downsample(4000), plot.Label(plot.ErrorLabeler))
		for _, r := range s.results {
			if err := p.Add(r); err != nil {
				return err
			}
		}
		p.Close()
		if err := writeFile(filepath.Join(dir, "plot-"+name+".html"), func(w io.Writer) error { _, err := p.WriteTo(w); return err }); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "results-"+name+".json"), func(w io.Writer) error {
			enc := vegeta.NewJSONEncoder(w)
			for _, r := range s.results {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "summary.json"), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	})
}

func writeFile(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
