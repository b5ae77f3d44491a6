// Command testreport reads `go test -json` on stdin and writes what plain
// `go test` writes (each package's result, each failed test's output) as
// it arrives. At the end it writes the figures that the tests matching
// -figures logged, the slowest tests, and the package results again as
// the summary, so that a verbose run serves both and each test runs once.
//
// Usage: go test -json ./... | go run ./.ci/testreport -figures 'gossip:TestChaos'
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

// test is what is known of one test.
type test struct {
	pkg, name string
	out       []string // output lines, without test2json's framing lines
	elapsed   float64
	done      bool
}

// logLine is a t.Log line as -v prints it: indent, file:line, message.
var logLine = regexp.MustCompile(`^ {4}[a-z0-9_]+\.go:[0-9]+: `)

func main() {
	figures := flag.String("figures", "", "`pkg-suffix:TestRE`: write the t.Log lines of the matching tests' top-level runs as figures")
	slowest := flag.Int("slowest", 10, "how many of the slowest tests to list")
	flag.Parse()
	var figPkg string
	var figTest *regexp.Regexp
	if *figures != "" {
		p, re, ok := strings.Cut(*figures, ":")
		if !ok {
			fmt.Fprintln(os.Stderr, "testreport: -figures wants pkg-suffix:TestRE")
			os.Exit(2)
		}
		figPkg, figTest = p, regexp.MustCompile(re)
	}
	if err := report(os.Stdin, os.Stdout, figPkg, figTest, *slowest); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

func report(r io.Reader, w io.Writer, figPkg string, figTest *regexp.Regexp, slowest int) error {
	tests := map[[2]string]*test{}
	var order []*test    // tests in the order they started
	var results []string // package result lines, as go test writes them
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event (go vet's output, say): pass it on.
			fmt.Fprintln(w, sc.Text())
			continue
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
			continue
		case e.Test == "":
			if e.Action == "output" && e.Output != "PASS\n" {
				if line := e.Output; strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "?  ") {
					results = append(results, strings.TrimSuffix(line, "\n"))
				}
				fmt.Fprint(w, e.Output)
			}
			if e.Action == "fail" {
				// A test that never finished (a panic, a timeout) shows its output.
				for _, t := range order {
					if t.pkg == e.Package && !t.done {
						writeLines(w, t.out)
						t.done = true
					}
				}
			}
			continue
		}
		k := [2]string{e.Package, e.Test}
		t := tests[k]
		if t == nil {
			t = &test{pkg: e.Package, name: e.Test}
			tests[k] = t
			order = append(order, t)
		}
		switch e.Action {
		case "output":
			if !strings.HasPrefix(e.Output, "=== ") {
				t.out = append(t.out, strings.TrimSuffix(e.Output, "\n"))
			}
		case "fail":
			writeLines(w, t.out)
			t.done, t.elapsed = true, e.Elapsed
		case "pass", "skip":
			t.done, t.elapsed = true, e.Elapsed
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if figTest != nil {
		fmt.Fprintf(w, "\n==> figures (%s %s)\n", figPkg, figTest)
		for _, t := range order {
			if strings.HasSuffix(t.pkg, figPkg) && !strings.Contains(t.name, "/") && figTest.MatchString(t.name) {
				writeFigures(w, t.out)
			}
		}
	}
	var top []*test
	for _, t := range order {
		if !strings.Contains(t.name, "/") {
			top = append(top, t)
		}
	}
	slices.SortStableFunc(top, func(a, b *test) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(w, "\n==> the %d slowest tests\n", min(slowest, len(top)))
	for _, t := range top[:min(slowest, len(top))] {
		fmt.Fprintf(w, "  %7.2fs %s %s\n", t.elapsed, t.pkg, t.name)
	}
	fmt.Fprintf(w, "\n==> go test summary (%d packages)\n", len(results))
	writeLines(w, results)
	return nil
}

// writeFigures writes the t.Log lines of out, and the lines that continue
// them, without their file:line prefix.
func writeFigures(w io.Writer, out []string) {
	in := false
	for _, l := range out {
		switch {
		case logLine.MatchString(l):
			in = true
			fmt.Fprintln(w, "  "+logLine.ReplaceAllString(l, ""))
		case in && strings.HasPrefix(l, "        "):
			fmt.Fprintln(w, l)
		default:
			in = false
		}
	}
}

func writeLines(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
