package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the module's root, where README.md is.
const root = ".."

// pages reads README.md and every page of docs/, keyed by their path from the root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, name := range append(names, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, name)
		require.NoError(t, err)
		out[filepath.ToSlash(rel)] = string(b)
	}
	require.Contains(t, out, "docs/strategies.md")
	return out
}

// prose is md without its fenced code blocks (blanked line by line, so that line numbers hold).
func prose(md string) string {
	lines := strings.Split(md, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// codeSpan is an inline code span.
var codeSpan = regexp.MustCompile("`[^`\n]+`")

// anchors are the ids GitHub gives md's headings: lower case, punctuation dropped (letters of
// every script kept), spaces as hyphens, a repeated one numbered.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(prose(md), "\n") {
		h, ok := strings.CutPrefix(l, "#")
		if !ok {
			continue
		}
		h = strings.TrimLeft(h, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		for n := 1; out[id]; n++ {
			id = fmt.Sprintf("%s-%d", b.String(), n)
		}
		out[id] = true
	}
	return out
}

// link is a Markdown link's target, outside code.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks are the relative links and anchors of the pages that lead nowhere. exists says
// whether a path from the root is a file or a directory of the repository.
func brokenLinks(pages map[string]string, exists func(string) bool) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		text := codeSpan.ReplaceAllString(prose(pages[name]), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := name
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(name), file))
				if !exists(dest) {
					problems = append(problems, fmt.Sprintf("%s: link to %s: no such file", name, target))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			md, ok := pages[dest]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: link to %s: an anchor in a file that is not a page", name, target))
				continue
			}
			if !anchors(md)[anchor] {
				problems = append(problems, fmt.Sprintf("%s: link to %s: %s has no heading #%s", name, target, dest, anchor))
			}
		}
	}
	return problems
}

// index is what the code defines, for the names the pages use.
type index struct {
	tests   map[string]bool // Test, Benchmark, Fuzz and Example functions
	flags   map[string]bool // every flag the commands define, and go test's own
	env     map[string]bool // SECKILL_ variables named in the code, and those of cmd/api's flags
	metrics map[string]bool // metrics the code registers, and the recording rules
	alerts  map[string]bool // the alerts of deploy/prometheus/rules.yml
}

// goTestFlags are the go command's flags the pages use.
var goTestFlags = []string{"race", "count", "run", "bench", "benchtime", "fuzz", "fuzztime", "short", "v", "p", "tags", "timeout"}

var (
	envName    = regexp.MustCompile(`\bSECKILL_[A-Z0-9_]*[A-Z0-9]\b`)
	metricName = regexp.MustCompile(`(^|[^/:\w{])(seckill_[a-z0-9_]*[a-z0-9])\b`)
	testName   = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz|Example)[A-Z0-9]\w*\*?`)
	alertName  = regexp.MustCompile(`\bSeckill[A-Z][A-Za-z0-9]+\b`)
	goRun      = regexp.MustCompile(`\bgo run \./(?:cmd/\w+|loadtest)\b(.*)`)
	flagToken  = regexp.MustCompile(`(?:^|\s)-([a-z][a-z0-9-]*)`)
	recordRule = regexp.MustCompile(`(?m)^\s*- record: (\S+)`)
	alertRule  = regexp.MustCompile(`(?m)^\s*- alert: (\S+)`)
)

// readIndex parses every Go file of the module and the Prometheus rules.
func readIndex(t *testing.T) index {
	t.Helper()
	ix := index{tests: map[string]bool{}, flags: map[string]bool{}, env: map[string]bool{}, metrics: map[string]bool{}, alerts: map[string]bool{}}
	for _, f := range goTestFlags {
		ix.flags[f] = true
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		file, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(p, "_test.go")
		// cmd/api reads each of its flags from the variable named after it (addr -> SECKILL_ADDR).
		api := filepath.ToSlash(filepath.Dir(p)) == root+"/cmd/api" && !isTest
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if isTest && n.Recv == nil && testName.MatchString(n.Name.Name) {
					ix.tests[n.Name.Name] = true
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || !isFlagMethod(sel.Sel.Name) {
					return true
				}
				for _, a := range n.Args[:min(2, len(n.Args))] {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							ix.flags[s] = true
							if api {
								ix.env["SECKILL_"+strings.ToUpper(strings.ReplaceAll(s, "-", "_"))] = true
							}
						}
						break
					}
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				if isTest {
					return true // a misspelt name planted in a test is neither a variable nor a metric
				}
				for _, e := range envName.FindAllString(s, -1) {
					ix.env[e] = true
				}
				if strings.HasPrefix(s, "seckill_") {
					ix.metrics[s] = true
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	rules, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "rules.yml"))
	require.NoError(t, err)
	for _, m := range recordRule.FindAllStringSubmatch(string(rules), -1) {
		ix.metrics[m[1]] = true
	}
	for _, m := range alertRule.FindAllStringSubmatch(string(rules), -1) {
		ix.alerts[m[1]] = true
	}
	require.NotEmpty(t, ix.tests)
	require.NotEmpty(t, ix.metrics)
	require.NotEmpty(t, ix.alerts)
	return ix
}

func isFlagMethod(name string) bool {
	switch name {
	case "String", "StringVar", "Bool", "BoolVar", "Int", "IntVar", "Int64", "Int64Var", "Uint", "UintVar",
		"Duration", "DurationVar", "Float64", "Float64Var", "Var", "Func":
		return true
	}
	return false
}

// unknownNames are the tests, flags, variables, metrics and alerts the pages name that the code
// does not have.
func unknownNames(pages map[string]string, ix index) []string {
	var problems []string
	report := func(page, kind, name string) {
		problems = append(problems, fmt.Sprintf("%s: %s %s does not exist", page, kind, name))
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		md := pages[name]
		seen := map[string]bool{}
		once := func(kind, n string) bool {
			k := kind + " " + n
			if seen[k] {
				return false
			}
			seen[k] = true
			return true
		}
		for _, n := range testName.FindAllString(md, -1) {
			if prefix, ok := strings.CutSuffix(n, "*"); ok {
				if !slices.ContainsFunc(slices.Collect(maps.Keys(ix.tests)), func(t string) bool { return strings.HasPrefix(t, prefix) }) && once("test", n) {
					report(name, "test", n)
				}
				continue
			}
			if !ix.tests[n] && once("test", n) {
				report(name, "test", n)
			}
		}
		for _, n := range envName.FindAllString(md, -1) {
			if !ix.env[n] && once("variable", n) {
				report(name, "environment variable", n)
			}
		}
		for _, m := range metricName.FindAllStringSubmatch(md, -1) {
			n := m[2]
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && ix.metrics[b] {
					base = b
				}
			}
			if !ix.metrics[base] && once("metric", n) {
				report(name, "metric", n)
			}
		}
		for _, n := range alertName.FindAllString(md, -1) {
			if !ix.alerts[n] && once("alert", n) {
				report(name, "alert", n)
			}
		}
		var flags []string
		for _, span := range codeSpan.FindAllString(prose(md), -1) {
			if s := strings.Trim(span, "`"); strings.HasPrefix(s, "-") {
				if m := flagToken.FindStringSubmatch(s); m != nil && strings.HasPrefix(s, "-"+m[1]) {
					flags = append(flags, m[1])
				}
			}
		}
		for _, l := range strings.Split(md, "\n") {
			if m := goRun.FindStringSubmatch(l); m != nil {
				for _, f := range flagToken.FindAllStringSubmatch(m[1], -1) {
					flags = append(flags, f[1])
				}
			}
		}
		for _, f := range flags {
			if !ix.flags[f] && once("flag", f) {
				report(name, "flag", "-"+f)
			}
		}
	}
	return problems
}

// provenance is the line a measured table carries: the command, the commit and the machine
// (its cores, its database and Redis) that produced it.
var provenance = regexp.MustCompile("^Measured by `[^`]+` at commit [0-9a-f]{7,40}\\S* on [0-9]+ cores?, (MariaDB|MySQL) [0-9.]+, Redis [0-9.]+")

// measured is a figure as a command prints it: a decimal with its unit, a rate or a ratio.
// Settings and bounds ("within 3 s", `2s`, ">= 0.8x") are whole numbers, code, or follow a
// comparison, and are not figures.
var measured = regexp.MustCompile(`\b\d+\.\d+ ?(ms|µs|s|MB|x)\b|\b\d[\d,]* ?(orders|req|pairs)/s\b|\b\d+\.\d+x\b`)

// figure is the first measured figure of a table row, "" when it has none.
func figure(row string) string {
	row = codeSpan.ReplaceAllString(row, "")
	for _, m := range measured.FindAllStringIndex(row, -1) {
		if before := strings.TrimRight(row[:m[0]], " "); !strings.HasSuffix(before, "=") && !strings.HasSuffix(before, "<") &&
			!strings.HasSuffix(before, ">") && !strings.HasSuffix(before, "≥") && !strings.HasSuffix(before, "≤") {
			return row[m[0]:m[1]]
		}
	}
	return ""
}

// unprovenTables are the tables of the pages that hold measured figures and do not say, on
// one of the five lines above them, which command, commit and machine produced them.
func unprovenTables(pages map[string]string) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		lines := strings.Split(prose(pages[name]), "\n")
		for i := 0; i < len(lines); i++ {
			if !strings.HasPrefix(lines[i], "|") {
				continue
			}
			start, figures := i, ""
			for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
				if f := figure(lines[i]); f != "" && figures == "" {
					figures = f
				}
			}
			if figures == "" {
				continue
			}
			proven := false
			for j := max(0, start-5); j < start; j++ {
				proven = proven || provenance.MatchString(strings.TrimSpace(lines[j]))
			}
			if !proven {
				problems = append(problems, fmt.Sprintf("%s:%d: a table of measured figures (%s) without the line that says which command, commit and machine produced it", name, start+1, figures))
			}
		}
	}
	return problems
}

// maxLines is the length past which a page is no longer read to the end.
const maxLines = 400

// longPages are the pages of maxLines lines or more.
func longPages(pages map[string]string) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		if n := strings.Count(strings.TrimSuffix(pages[name], "\n"), "\n") + 1; n >= maxLines {
			problems = append(problems, fmt.Sprintf("%s: %d lines: a page is read to the end, keep it under %d (history goes in git)", name, n, maxLines))
		}
	}
	return problems
}

var (
	// issueWord and issueHash are a tracker's number cited as "issue 36", "issues 24/35" or "#36":
	// a reader of the repository cannot open it. A public repository's "tidb#69720" names where it
	// is.
	issueWord = regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)
	issueHash = regexp.MustCompile(`(?:^|[\s(\[,;])(#\d+)\b`)
)

// issueCitations are the places where a page cites an issue number.
func issueCitations(pages map[string]string) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		for i, l := range strings.Split(pages[name], "\n") {
			cites := issueWord.FindAllString(l, -1)
			for _, m := range issueHash.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
				cites = append(cites, m[1])
			}
			for _, c := range cites {
				problems = append(problems, fmt.Sprintf("%s:%d: %q cites an issue number, which a reader of the repository cannot open: say what it was", name, i+1, strings.TrimSpace(c)))
			}
		}
	}
	return problems
}

var (
	// productKey is a key of one product's Redis state as a page gives it: seckill:{sku}:name,
	// the name up to its first colon (swept:<reservation> is swept).
	productKey = regexp.MustCompile(`seckill:\{[^}\s` + "`" + `]*\}:([a-z_]+)`)
	// keySuffix is the short form a page may use beside a full key: ` + "`:reserved`" + `.
	keySuffix = regexp.MustCompile("^`:([a-z_]+)(?::<[a-z ]+>)?`$")
)

// redisKeys are the names of a product's Redis keys in the code: admission's (KeysOf and the
// markers beside them, internal/admission/scripts.go) and the Redis lock's
// (internal/lock/redislock), read from their source.
func redisKeys(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	add := func(s string) {
		s = strings.TrimPrefix(s, "}:")
		if name, _, _ := strings.Cut(s, ":"); name != "" {
			names[name] = true
		}
	}
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal", "admission", "scripts.go"), nil, 0)
	require.NoError(t, err)
	ast.Inspect(file, func(n ast.Node) bool {
		// p + "stock", prefix(sku) + "swept:": a name after the product's prefix.
		bin, ok := n.(*ast.BinaryExpr)
		if !ok || bin.Op != token.ADD {
			return true
		}
		lit, ok := bin.Y.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		isPrefix := false
		switch x := bin.X.(type) {
		case *ast.Ident:
			isPrefix = x.Name == "p"
		case *ast.CallExpr:
			f, ok := x.Fun.(*ast.Ident)
			isPrefix = ok && f.Name == "prefix"
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && isPrefix {
			add(s)
		}
		return true
	})
	require.Subset(t, slices.Collect(maps.Keys(names)), []string{"stock", "buyers", "reserved", "queued"},
		"admission's keys not found in scripts.go: has KeysOf changed?")
	lock, err := os.ReadFile(filepath.Join(root, "internal", "lock", "redislock", "redislock.go"))
	require.NoError(t, err)
	m := regexp.MustCompile(`"\}:([a-z_]+)"`).FindSubmatch(lock)
	require.NotNil(t, m, "the Redis lock's key not found in redislock.go: has Key changed?")
	add(string(m[1]))
	return names
}

// unknownRedisKeys are the keys of a product's Redis state that the pages name and the code
// does not have.
func unknownRedisKeys(pages map[string]string, keys map[string]bool) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		seen := map[string]bool{}
		md := pages[name]
		var found []string
		for _, m := range productKey.FindAllStringSubmatch(md, -1) {
			found = append(found, m[1])
		}
		for _, span := range codeSpan.FindAllString(md, -1) {
			if m := keySuffix.FindStringSubmatch(span); m != nil {
				found = append(found, m[1])
			}
		}
		for _, k := range found {
			if !keys[k] && !seen[k] {
				seen[k] = true
				problems = append(problems, fmt.Sprintf("%s: Redis key seckill:{sku}:%s does not exist (the keys: %s)", name, k,
					strings.Join(slices.Sorted(maps.Keys(keys)), ", ")))
			}
		}
	}
	return problems
}

func existsInRepo(p string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
	return err == nil
}

// TestLinks: every relative link of README and docs/ leads to a file of the repository, and
// every anchor to a heading of its page.
func TestLinks(t *testing.T) {
	assert.Empty(t, brokenLinks(pages(t), existsInRepo))
}

// TestNames: every test, flag, SECKILL_ variable, metric and alert the pages name exists.
func TestNames(t *testing.T) {
	assert.Empty(t, unknownNames(pages(t), readIndex(t)))
}

// TestProvenance: every measured table of the pages says which command, commit and machine
// produced it.
func TestProvenance(t *testing.T) {
	assert.Empty(t, unprovenTables(pages(t)))
}

// TestPageLength: every page is under maxLines lines.
func TestPageLength(t *testing.T) {
	assert.Empty(t, longPages(pages(t)))
}

// TestNoIssueNumbers: no page cites an issue number.
func TestNoIssueNumbers(t *testing.T) {
	assert.Empty(t, issueCitations(pages(t)))
}

// TestRedisKeys: every key of a product's Redis state that a page names is one the code has.
func TestRedisKeys(t *testing.T) {
	assert.Empty(t, unknownRedisKeys(pages(t), redisKeys(t)))
}

// TestChecksCatchBreaks plants one break of each kind in a copy of the real pages: each must be
// reported, and only it.
func TestChecksCatchBreaks(t *testing.T) {
	real, ix, keys := pages(t), readIndex(t), redisKeys(t)
	plant := func(extra string) map[string]string {
		p := maps.Clone(real)
		p["docs/planted.md"] = "# Planted\n\n## A heading\n\n" + extra + "\n"
		return p
	}
	cases := []struct {
		name, text, want string
		check            func(map[string]string) []string
	}{
		{"a missing file", "See [the notes](../NOTES.md).", "link to ../NOTES.md: no such file", func(p map[string]string) []string { return brokenLinks(p, existsInRepo) }},
		{"a missing anchor", "See [strategies](strategies.md#no-such-heading).", "has no heading #no-such-heading", func(p map[string]string) []string { return brokenLinks(p, existsInRepo) }},
		{"a missing anchor on the page", "See [above](#a-headin).", "has no heading #a-headin", func(p map[string]string) []string { return brokenLinks(p, existsInRepo) }},
		{"a test that does not exist", "`TestStrategiesOversell` proves it.", "test TestStrategiesOversell does not exist", func(p map[string]string) []string { return unknownNames(p, ix) }},
		{"a variable that does not exist", "Set `SECKILL_LOCK_TIMEOUT`.", "environment variable SECKILL_LOCK_TIMEOUT does not exist", func(p map[string]string) []string { return unknownNames(p, ix) }},
		{"a metric that does not exist", "Watch `seckill_locks_lost_total`.", "metric seckill_locks_lost_total does not exist", func(p map[string]string) []string { return unknownNames(p, ix) }},
		{"an alert that does not exist", "`SeckillLockStuck` fires.", "alert SeckillLockStuck does not exist", func(p map[string]string) []string { return unknownNames(p, ix) }},
		{"a flag that does not exist", "```sh\ngo run ./loadtest -spawn 3 -clients 64\n```", "flag -clients does not exist", func(p map[string]string) []string { return unknownNames(p, ix) }},
		{"a flag in a code span", "Add `-fault lock-gone`, or `-fautl`.", "flag -fautl does not exist", func(p map[string]string) []string { return unknownNames(p, ix) }},
		{"a measured table without provenance", "| strategy | orders/s |\n| --- | --- |\n| `hybrid` | 1005 orders/s |", "docs/planted.md:5: a table of measured figures (1005 orders/s)", unprovenTables},
		{"a provenance line without the machine", "Measured by `go run ./cmd/lab all` at commit 1d1dcfa.\n\n| form | p99 |\n| --- | --- |\n| a | 12.5 ms |", "a table of measured figures (12.5 ms)", unprovenTables},
		{"a page too long", strings.Repeat("A line.\n", maxLines), "docs/planted.md: 405 lines", longPages},
		{"an issue number", "As issue 36 asked, it is faster.", `"issue 36" cites an issue number`, issueCitations},
		{"an issue number as a hash", "Faster since (#36).", `:5: "#36" cites an issue number`, issueCitations},
		{"a Redis key admission lacks", "Reservations are in `seckill:{sku}:reservations`.", "Redis key seckill:{sku}:reservations does not exist", func(p map[string]string) []string { return unknownRedisKeys(p, keys) }},
		{"a Redis key in short", "Its keys: `seckill:{sku}:stock`, `:buyers`, `:reservations`.", "Redis key seckill:{sku}:reservations does not exist", func(p map[string]string) []string { return unknownRedisKeys(p, keys) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.check(plant(c.text))
			require.Len(t, got, 1, "%v", got)
			assert.Contains(t, got[0], c.want)
		})
	}
	proven := "Measured by `go run ./cmd/lab all` at commit 1d1dcfa on 2 cores, MariaDB 10.11.19, Redis 7.0.15, 2026-12-01.\n\n| form | p99 |\n| --- | --- |\n| a | 12.5 ms |"
	assert.Empty(t, unprovenTables(plant(proven)), "a table with its provenance line passes")
	bounds := "| target | bound |\n| --- | --- |\n| hybrid against pessimistic | >= 0.8x |\n| p99 | <= 50.0 ms |"
	assert.Empty(t, unprovenTables(plant(bounds)), "a table of bounds is no measurement")
}
