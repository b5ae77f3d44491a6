package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/rlcluster/rlcluster/internal/window"
)

// row is one cell's (or, with -by-phase, one run's) result.
type row struct {
	cell  cell
	label string // the arrivals column
	v     verdict
	lag   int64 // against a node: the latest request's delay, ms
	// against a node: decisions made by its in-memory fallback while the
	// cell ran (Redis slower than the node's store timeout); with
	// -parallel, those of the cells that ran beside it count too
	fallback uint64
	retried  int // against a node: runs dropped for late or failed requests
}

// merge adds run v to the row.
func (r *row) merge(v verdict) {
	if v.steadyMin >= 0 && (r.v.steadyMin < 0 || v.steadyMin < r.v.steadyMin) {
		r.v.steadyMin = v.steadyMin
	}
	r.v.decisions += v.decisions
	r.v.denials += v.denials
	r.v.badDeny += v.badDeny
	r.v.badAdmit += v.badAdmit
	r.v.admitted += v.admitted
	r.v.ratios = append(r.v.ratios, v.ratios...)
	r.v.steady += v.steady
	r.v.logSteady += v.logSteady
}

// figures are a row's summary figures.
type figures struct {
	denyShare, admitShare float64
	ratio                 float64 // steady admitted / exact log's; -1 if the log admitted none
	p50, p999, max        float64
}

func (r row) figures() figures {
	f := figures{ratio: -1}
	if n := float64(r.v.decisions); n > 0 {
		f.denyShare = float64(r.v.badDeny) / n
		f.admitShare = float64(r.v.badAdmit) / n
	}
	if r.v.logSteady > 0 {
		f.ratio = float64(r.v.steady) / float64(r.v.logSteady)
	}
	if len(r.v.ratios) > 0 {
		s := slices.Clone(r.v.ratios)
		slices.Sort(s)
		f.p50, f.p999, f.max = s[len(s)/2], s[len(s)*999/1000], s[len(s)-1]
	}
	return f
}

// cellName names a row's cell for the summary.
func (r row) cellName() string {
	l := r.cell.cnt.limit
	return fmt.Sprintf("%d per %s, %s %gx", l.Limit, fmtWindow(l.Window), r.label, r.cell.rate)
}

// report prints the rows as a Markdown table and the worst figures.
func report(out io.Writer, rows []row) {
	fmt.Fprintln(out, "| limit | window | arrivals | rate | hits/req | decisions | unjustified denials | unjustified admissions | steady vs exact log | p50 | p99.9 | max | steady min |")
	fmt.Fprintln(out, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	type worst struct {
		x    float64
		name string
	}
	deny, admit, maxW := worst{-1, ""}, worst{-1, ""}, worst{-1, ""}
	ratio, steadyMin := worst{2, ""}, worst{2, ""}
	var lag int64
	var fb uint64
	retried := 0
	for _, r := range rows {
		f := r.figures()
		lag = max(lag, r.lag)
		fb += r.fallback
		retried += r.retried
		if f.denyShare > deny.x {
			deny = worst{f.denyShare, r.cellName()}
		}
		if f.admitShare > admit.x {
			admit = worst{f.admitShare, r.cellName()}
		}
		if f.max > maxW.x {
			maxW = worst{f.max, r.cellName()}
		}
		ratioS, minS := "-", "-"
		if f.ratio >= 0 {
			ratioS = fmt.Sprintf("%.4f", f.ratio)
			if r.cell.rate >= 2 && f.ratio < ratio.x {
				ratio = worst{f.ratio, r.cellName()}
			}
		}
		if r.v.steadyMin >= 0 && r.cell.shape != shapeOnOff {
			minS = fmt.Sprintf("%.3f", r.v.steadyMin)
			if r.cell.rate >= 2 && r.v.steadyMin < steadyMin.x {
				steadyMin = worst{r.v.steadyMin, r.cellName()}
			}
		}
		label := r.label
		if r.fallback > 0 {
			label += fmt.Sprintf(" (%d by the fallback)", r.fallback)
		}
		l := r.cell.cnt.limit
		fmt.Fprintf(out, "| %d | %s | %s | %gx | %d | %d | %s | %s | %s | %.3f | %.3f | %.3f | %s |\n",
			l.Limit, fmtWindow(l.Window), label, r.cell.rate, r.cell.hits, r.v.decisions,
			share(r.v.badDeny, r.v.decisions), share(r.v.badAdmit, r.v.decisions), ratioS, f.p50, f.p999, f.max, minS)
	}
	fmt.Fprintf(out, "\nworst: unjustified denials %s; unjustified admissions %s; trailing max %s",
		worstShare(deny.x, deny.name), worstShare(admit.x, admit.name), worstFig(maxW.x, maxW.name, 3))
	if ratio.name != "" {
		fmt.Fprintf(out, "; steady vs exact log at 2x and more %s", worstFig(ratio.x, ratio.name, 4))
	}
	if steadyMin.name != "" {
		fmt.Fprintf(out, "; steady min at 2x and more (not on/off) %s", worstFig(steadyMin.x, steadyMin.name, 3))
	}
	if lag > 0 {
		fmt.Fprintf(out, "; requests went out up to %d ms late", lag)
	}
	if retried > 0 {
		fmt.Fprintf(out, "; %d runs dropped and run again on fresh keys (requests more than W/10 late, or a request that failed)", retried)
	}
	if fb > 0 {
		fmt.Fprintf(out, "; %d decisions were made by the node's in-memory fallback (its store answered later than --store-timeout)", fb)
	}
	fmt.Fprintln(out)
}

// summarize prints one row per limit and window: the worst of its rows.
func summarize(out io.Writer, rows []row) {
	fmt.Fprintln(out, "| limit | window | decisions | unjustified denials at 0.5x | at 0.9x | at 2x and more | unjustified admissions | steady vs exact log at 2x and more, least | trailing max |")
	fmt.Fprintln(out, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	type group struct {
		l                           window.Limit
		decisions                   int
		deny05, deny09, denyHi, adm float64
		ratio, max                  float64
	}
	var groups []*group
	for _, r := range rows {
		l := r.cell.cnt.limit
		if len(groups) == 0 || groups[len(groups)-1].l != l {
			groups = append(groups, &group{l: l, ratio: -1})
		}
		g, f := groups[len(groups)-1], r.figures()
		g.decisions += r.v.decisions
		switch {
		case r.cell.rate <= 0.5:
			g.deny05 = max(g.deny05, f.denyShare)
		case r.cell.rate <= 0.9:
			g.deny09 = max(g.deny09, f.denyShare)
		case r.cell.rate >= 2:
			g.denyHi = max(g.denyHi, f.denyShare)
			if f.ratio >= 0 && (g.ratio < 0 || f.ratio < g.ratio) {
				g.ratio = f.ratio
			}
		}
		g.adm = max(g.adm, f.admitShare)
		g.max = max(g.max, f.max)
	}
	p := func(x float64) string {
		if x == 0 {
			return "0"
		}
		return pct(x)
	}
	for _, g := range groups {
		ratio := "-"
		if g.ratio >= 0 {
			ratio = fmt.Sprintf("%.4f", g.ratio)
		}
		fmt.Fprintf(out, "| %d | %s | %d | %s | %s | %s | %s | %s | %.3f |\n", g.l.Limit, fmtWindow(g.l.Window), g.decisions,
			p(g.deny05), p(g.deny09), p(g.denyHi), p(g.adm), ratio, g.max)
	}
}

// share formats n of total as a count and a percentage.
func share(n, total int) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, pct(float64(n)/float64(total)))
}

func pct(x float64) string {
	if x > 0 && x < 0.00001 {
		return "<0.001%"
	}
	return fmt.Sprintf("%.3f%%", 100*x)
}

func worstShare(x float64, name string) string {
	if x <= 0 {
		return "0"
	}
	return pct(x) + " (" + name + ")"
}

func worstFig(x float64, name string, prec int) string {
	if name == "" {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', prec, 64) + " (" + name + ")"
}

func joinFloats(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ", ")
}
