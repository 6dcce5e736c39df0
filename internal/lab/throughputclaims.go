package lab

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// throughputClaim is one cell of the sources' tables: a range of pairs a second, for the
// families it names. high 0: no upper end.
type throughputClaim struct {
	says      string
	families  []string
	low, high float64
}

// holds reports whether rate is in the claim's range.
func (c throughputClaim) holds(rate float64) bool {
	return rate >= c.low && (c.high == 0 || rate < c.high)
}

// throughputClaims are the tables' performance rows. 千级 is read as 1,000-9,999 a second, 万级 as
// 10,000-99,999 and 十万级 as 100,000-999,999. The two tables do not agree («Locks in practice» has
// MySQL under 1000, «Choosing a lock» the database at 千级), so no figure can bear out every claim:
// each is a judgement of its own.
var throughputClaims = []throughputClaim{
	{"«Locks in practice»: Redis (Redisson) 10万+/s", []string{"redis"}, 100_000, 0},
	{"«Choosing a lock»: Redis 万级 ~ 十万级", []string{"redis"}, 10_000, 1_000_000},
	{"«Locks in practice»: ZooKeeper 1-5万/s", []string{"zk"}, 10_000, 50_000},
	{"«Choosing a lock»: ZooKeeper/etcd 千级", []string{"zk", "etcd"}, 1_000, 10_000},
	{"«Locks in practice»: MySQL 1000/s以下", []string{"table", "row"}, 0, 1_000},
	{"«Choosing a lock»: database 千级", []string{"table", "row"}, 1_000, 10_000},
}

// databaseFamilies are the locks the tables call the database's.
var databaseFamilies = map[string]bool{"table": true, "row": true}

// familyBest is a family's best cell: the most pairs a second it did here, the figure its claims
// are judged on — a table's row says what a lock can do.
type familyBest struct {
	slug, name string
	cell       throughputCell
}

func (b familyBest) said() string {
	where := "a key each"
	switch {
	case b.cell.single:
		where = "alone"
	case b.cell.shared:
		where = "one key"
	}
	return fmt.Sprintf("best %s (%d clients, %s)", perSec(b.cell.rate), b.cell.clients, where)
}

// judgeClaims holds each claim against the best cell of each family it names that was measured,
// one judgement per claim and family, and then the ranking both tables give: Redis first, the
// database last. A family that was not measured (ZooKeeper missing) is not judged.
func judgeClaims(claims []throughputClaim, best []familyBest) []Judgement {
	bySlug := map[string]familyBest{}
	for _, b := range best {
		bySlug[b.slug] = b
	}
	var out []Judgement
	for _, cl := range claims {
		for _, slug := range cl.families {
			if b, ok := bySlug[slug]; ok {
				out = append(out, Judgement{Claim: cl.says, Subject: b.name, Measured: b.said(), Held: cl.holds(b.cell.rate)})
			}
		}
	}
	if redis, ok := bySlug["redis"]; ok && len(best) > 1 {
		var next *familyBest
		for i, b := range best {
			if b.slug != "redis" && (next == nil || b.cell.rate > next.cell.rate) {
				next = &best[i]
			}
		}
		out = append(out, Judgement{Claim: "«Choosing a lock» and «Locks in practice»: Redis first", Subject: redis.name + " against the fastest other lock",
			Measured: fmt.Sprintf("%s %s; %s %s", redis.name, perSec(redis.cell.rate), next.name, perSec(next.cell.rate)),
			Held:     redis.cell.rate > next.cell.rate})
	}
	var fastestDB, slowestOther *familyBest
	for i, b := range best {
		switch {
		case databaseFamilies[b.slug] && (fastestDB == nil || b.cell.rate > fastestDB.cell.rate):
			fastestDB = &best[i]
		case !databaseFamilies[b.slug] && (slowestOther == nil || b.cell.rate < slowestOther.cell.rate):
			slowestOther = &best[i]
		}
	}
	if fastestDB != nil && slowestOther != nil {
		out = append(out, Judgement{Claim: "«Choosing a lock» and «Locks in practice»: the database last", Subject: "the faster database lock against the slowest other",
			Measured: fmt.Sprintf("%s %s; %s %s", fastestDB.name, perSec(fastestDB.cell.rate), slowestOther.name, perSec(slowestOther.cell.rate)),
			Held:     fastestDB.cell.rate < slowestOther.cell.rate})
	}
	return out
}

// judgeThroughput is the measurement: the figures of every family, and the claims judged
// against them (judgeClaims). It is complete when every cell was measured and did pairs.
func judgeThroughput(families []lockFamily, table map[string][]throughputCell, clientCounts []int, cellTime, bound time.Duration) Result {
	var best []familyBest
	for _, f := range families {
		b := familyBest{slug: f.slug, name: f.name}
		for _, c := range table[f.slug] {
			if c.rate > b.cell.rate {
				b.cell = c
			}
		}
		best = append(best, b)
	}
	claims := judgeClaims(throughputClaims, best)
	contradicted := map[string]bool{}
	for _, j := range claims {
		if !j.Held {
			contradicted[j.Subject] = true
		}
	}

	most := clientCounts[len(clientCounts)-1]
	complete := true
	var rows []string
	chart := Chart{Title: "Acquire+release pairs a second, 8 clients, a key each (red: a claim about the lock contradicted)", Unit: "pairs/s"}
	for _, f := range families {
		var figs []string
		for _, c := range table[f.slug] {
			if !c.measured || c.pairs == 0 {
				complete = false
			}
			if c.single && c.shared {
				continue // the one-client figure, said once
			}
			where := "a key each"
			if c.shared {
				where = "one key"
			}
			if c.single {
				where = "alone"
			}
			fig := fmt.Sprintf("%d %s %s", c.clients, where, perSec(c.rate))
			if c.timeouts > 0 {
				fig += fmt.Sprintf(" (%d waits ran out)", c.timeouts)
			}
			figs = append(figs, fig)
			if c.clients == 8 && !c.shared {
				chart.Bars = append(chart.Bars, Bar{Label: f.name, Value: c.rate, Failed: contradicted[f.name]})
			}
		}
		rows = append(rows, f.name+": "+strings.Join(figs, ", "))
	}
	return Result{
		Measured: &Measurement{
			Method: fmt.Sprintf("clients loop lock -> unlock for %s a cell, a wait bounded at %s, at %s clients, a key each and one shared key; %d CPUs here, the Redis nodes, etcd and ZooKeeper started on them",
				cellTime, bound, joinInts(clientCounts), runtime.NumCPU()),
			Figures: fmt.Sprintf("%s. Ranking, 8 clients a key each: %s; %d clients one key: %s",
				strings.Join(rows, "; "), ranking(families, table, 8, false), most, ranking(families, table, most, true)),
			Complete: complete,
			Claims:   claims,
		},
		Chart: chart,
	}
}

// joinInts is "1, 8 and 64".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// ranking is the families fastest first in the cell of n clients, shared or not.
func ranking(families []lockFamily, table map[string][]throughputCell, n int, shared bool) string {
	type entry struct {
		name string
		rate float64
	}
	var es []entry
	for _, f := range families {
		for _, c := range table[f.slug] {
			if c.clients == n && c.shared == shared {
				es = append(es, entry{f.name, c.rate})
			}
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(b.rate, a.rate) })
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%s %s", e.name, perSec(e.rate))
	}
	return strings.Join(out, " > ")
}

// perSec is a rate, rounded to what a table of orders of magnitude needs.
func perSec(r float64) string {
	return fmt.Sprintf("%.0f/s", r)
}
