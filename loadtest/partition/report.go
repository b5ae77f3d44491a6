package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// report prints the figures and checks the bounds.
func report(out io.Writer, c config, tl timeline, ld *load, views [][]View) error {
	n := len(c.Targets)
	names := make([]string, n)
	for i, r := range c.Targets {
		names[i] = r.Name
	}
	var problems []error
	sent, errs := 0, 0
	for ri := range n {
		sent += ld.served[ri] + ld.errs[ri]
		errs += ld.errs[ri]
		fmt.Fprintf(out, "partition: %s: %d decided, %d errors, %d not sent (workers busy)\n", names[ri], ld.served[ri], ld.errs[ri], ld.missed[ri])
	}
	dur := tl.End.Sub(tl.Start)
	fmt.Fprintf(out, "partition: %d requests sent in %v: %.1fx the limit's rate (%.0fx offered)\n",
		sent, dur.Round(time.Second), float64(sent)/dur.Seconds()/(float64(c.Limit)/c.Window.Seconds()), c.Factor)
	if len(ld.lat) > 0 {
		slices.Sort(ld.lat)
		q := func(p float64) time.Duration {
			return ld.lat[int(p*float64(len(ld.lat)-1))].Round(100 * time.Microsecond)
		}
		fmt.Fprintf(out, "partition: decision round trip p50 %v, p99 %v, max %v\n", q(0.5), q(0.99), q(1))
	}
	if errs*100 > sent {
		problems = append(problems, fmt.Errorf("%d of %d requests failed (last: %v)", errs, sent, ld.lastErr))
	}

	windows := trailing(ld.adm, c.Window, n)
	phases := []Phase{
		{"before the cut", tl.Start, tl.CutStart},
		{"steady, before the cut", tl.Start.Add(2 * c.Window), tl.CutStart},
		{"during the cut", tl.CutStart, tl.HealStart},
		{"after the heal", tl.HealStart, tl.End.Add(time.Second)},
		{"a window after the heal", tl.HealStart.Add(c.Window), tl.End.Add(time.Second)},
		{"during and after", tl.CutStart, tl.End.Add(time.Second)},
	}
	fmt.Fprintf(out, "partition: trailing windows (t-%v, t] at every admission, x limit %d (bound %.3f):\n", c.Window, c.Limit, c.Bound)
	fmt.Fprintf(out, "  %-24s %8s %6s %6s %6s  %-28s %s\n", "phase", "windows", "max", "min", "p50", "worst window ends", "admitted per region in phase")
	var fault PhaseStats
	for _, p := range phases {
		st := summarize(p, windows, ld.adm, c.Limit, n)
		worst := "-"
		if st.Windows > 0 {
			worst = fmt.Sprintf("%s %s", relTo(st.Worst.At, tl), perRegion(names, st.Worst.PerRegion))
		}
		fmt.Fprintf(out, "  %-24s %8d %6.3f %6.3f %6.3f  %-28s %s\n", p.Name, st.Windows, st.Max, st.Min, st.P50, worst, perRegion(names, st.Admitted))
		if p.Name == "during and after" {
			fault = st
		}
		if st.Windows > 0 && st.Max > c.Bound {
			problems = append(problems, fmt.Errorf("%s: a trailing window held %.3f x the limit, over %.3f (ending %s, %s)",
				p.Name, st.Max, c.Bound, relTo(st.Worst.At, tl), perRegion(names, st.Worst.PerRegion)))
		}
		if p.Name == "during the cut" {
			for ri, a := range st.Admitted {
				if a == 0 {
					problems = append(problems, fmt.Errorf("%s admitted nothing during the cut: the load did not reach it", names[ri]))
				}
			}
		}
	}
	if fault.Windows == 0 {
		problems = append(problems, errors.New("no admission during or after the cut"))
	}

	// Agreement: on the bucket that closed during the cut, from the heal;
	// on the bucket open at the heal, from its end, with the grace of the
	// reconciliation that runs then.
	w := int64(c.Window)
	healBucket := tl.HealStart.UnixNano() / w
	closed := agreement(views, healBucket-1, names, tl.HealStart, 2*c.Flush+c.OneWay, tl.CutStart, tl.HealStart)
	open := agreement(views, healBucket, names, time.Unix(0, (healBucket+1)*w), c.Grace+2*c.Flush+c.OneWay, time.Time{}, time.Time{})
	reads := 0
	for _, vs := range views {
		reads += len(vs)
	}
	fmt.Fprintf(out, "partition: agreement (%d reads of the regions' stores, every %v per region):\n  closed during the cut: %s\n  open at the heal:      %s\n",
		reads, c.Poll, closed, open)
	for _, a := range []Agreement{closed, open} {
		if a.After() < 0 || a.After() > a.Bound {
			problems = append(problems, fmt.Errorf("regions did not agree on bucket %d within %v of %s (%v)",
				a.Bucket, a.Bound, a.Since.Format("15:04:05.000"), a.After()))
		}
	}
	if !closed.Diverged {
		problems = append(problems, fmt.Errorf("no region held other counts of bucket %d during the cut: the cut did not show", closed.Bucket))
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	fmt.Fprintln(out, "partition: PASS")
	return nil
}

// relTo names t relative to the cut and the heal.
func relTo(t time.Time, tl timeline) string {
	switch {
	case t.Before(tl.CutStart):
		return fmt.Sprintf("cut%+.2fs", t.Sub(tl.CutStart).Seconds())
	case t.Before(tl.HealStart):
		return fmt.Sprintf("cut+%.2fs", t.Sub(tl.CutStart).Seconds())
	default:
		return fmt.Sprintf("heal+%.2fs", t.Sub(tl.HealStart).Seconds())
	}
}

func perRegion(names []string, counts []int) string {
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s:%d", name, counts[i])
	}
	return strings.Join(parts, " ")
}
