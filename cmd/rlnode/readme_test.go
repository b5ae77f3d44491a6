package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/apitest"
	"github.com/rlcluster/rlcluster/internal/polltest"
	"github.com/rlcluster/rlcluster/internal/region/redistest"
)

// The user docs: the README and every page under docs/.
func readDocs(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, filepath.Join("..", "..", "README.md"), filepath.Join("..", "..", "deploy", "multiregion", "README.md"))
	docs := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.ToSlash(strings.TrimPrefix(p, filepath.Join("..", "..")+string(filepath.Separator)))] = string(b)
	}
	if len(docs) < 3 {
		t.Fatalf("found only %d docs", len(docs))
	}
	return docs
}

// helpFlags returns every flag's default as -help prints it.
func helpFlags(t *testing.T) map[string]string {
	t.Helper()
	var c config
	defaults := map[string]string{}
	newFlagSet(&c, io.Discard).VisitAll(func(f *flag.Flag) { defaults[f.Name] = defaultText(f) })
	return defaults
}

// foreignFlags are other tools' flags that the docs mention in inline code
// (`--cert` is curl's).
var foreignFlags = map[string]bool{"cert": true}

var (
	inlineFlagRE  = regexp.MustCompile("`--([a-z0-9-]+)[^`]*`")
	rlnodeCmdRE   = regexp.MustCompile(`(?:go run \./cmd/rlnode|(?:^|[\s/])rlnode)((?:\s+[^|&;]*)?)`)
	cmdFlagRE     = regexp.MustCompile(`(?:^|\s)--([a-z0-9-]+)`)
	envNameRE     = regexp.MustCompile(`\bRLNODE_[A-Z0-9_]+\b`)
	fenceRE       = regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```")
	spaceRE       = regexp.MustCompile(`\s+`)
	defaultParenR = regexp.MustCompile("`--([a-z0-9-]+)` \\((?:its default, |default |default: )`([^`]+)`\\)")
	defaultNumRE  = regexp.MustCompile("`--([a-z0-9-]+)` \\(([0-9][0-9,]*(?:\\.[0-9]+)?) ?(ms|s|m|h)?\\)")
	defaultByRE   = regexp.MustCompile("`--([a-z0-9-]+)`, ([0-9][0-9,]*) ?(ms|s|m|h)? by default")
)

// TestDocsNameOnlyRealFlags: every --flag and RLNODE_ variable the docs
// mention, in prose or in an rlnode command line, is one of rlnode's.
func TestDocsNameOnlyRealFlags(t *testing.T) {
	defaults := helpFlags(t)
	// rlnode reset's own flags, which its commands in the docs use.
	var rf resetFlags
	newResetFlagSet(&rf, io.Discard).VisitAll(func(f *flag.Flag) {
		if _, ok := defaults[f.Name]; !ok {
			defaults[f.Name] = defaultText(f)
		}
	})
	n := 0
	for name, doc := range readDocs(t) {
		check := func(flagName, where string) {
			n++
			if _, ok := defaults[flagName]; !ok && !foreignFlags[flagName] {
				t.Errorf("%s: %s names --%s, which rlnode -help does not list", name, where, flagName)
			}
		}
		for _, m := range inlineFlagRE.FindAllStringSubmatch(doc, -1) {
			check(m[1], "`"+strings.TrimSuffix(strings.TrimPrefix(m[0], "`"), "`")+"`")
		}
		for _, b := range fenceRE.FindAllStringSubmatch(doc, -1) {
			if b[1] != "sh" {
				continue
			}
			for _, line := range strings.Split(b[2], "\n") {
				for _, m := range rlnodeCmdRE.FindAllStringSubmatch(line, -1) {
					for _, f := range cmdFlagRE.FindAllStringSubmatch(m[1], -1) {
						check(f[1], "the command "+strings.TrimSpace(line))
					}
				}
			}
		}
		for _, env := range envNameRE.FindAllString(doc, -1) {
			if env == authTokenEnv {
				continue
			}
			flagName := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, envPrefix)), "_", "-")
			if _, ok := defaults[flagName]; !ok {
				t.Errorf("%s names %s, which is neither %s nor a flag's variable", name, env, authTokenEnv)
			}
		}
	}
	if n < 100 {
		t.Errorf("found only %d flag mentions in the docs: is the parsing broken?", n)
	}
}

// TestDocsDefaultsMatchHelp: every table with flag and default columns
// (docs/configuration.md's reference, the README's summary) documents each
// flag it lists with the default -help prints, and so does prose of the
// forms "`--flag` (20 ms)", "`--flag` (default `x`)" and "`--flag`, 1 s by
// default". docs/configuration.md lists every flag.
func TestDocsDefaultsMatchHelp(t *testing.T) {
	defaults := helpFlags(t)
	docs := readDocs(t)
	tables, prose := 0, 0
	for name, doc := range docs {
		listed := map[string]bool{}
		var flagCol, defCol = -1, -1
		for _, line := range strings.Split(doc, "\n") {
			if !strings.HasPrefix(line, "|") {
				flagCol, defCol = -1, -1
				continue
			}
			cells := strings.Split(strings.Trim(line, "|"), " | ")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if flagCol < 0 {
				if i, j := slices.Index(cells, "flag"), slices.Index(cells, "default"); i >= 0 && j >= 0 {
					flagCol, defCol = i, j
					tables++
				}
				continue
			}
			if len(cells) <= max(flagCol, defCol) || strings.HasPrefix(cells[flagCol], "---") {
				continue
			}
			for _, m := range inlineFlagRE.FindAllStringSubmatch(cells[flagCol], -1) {
				f := m[1]
				listed[f] = true
				want, ok := defaults[f]
				if !ok {
					t.Errorf("%s: the table lists --%s, which rlnode does not have", name, f)
					continue
				}
				if strings.Contains(cells[flagCol], ",") {
					continue // a row for several flags shows what they share
				}
				got := cells[defCol]
				switch {
				case strings.HasPrefix(got, "`"):
					got = strings.SplitN(strings.TrimPrefix(got, "`"), "`", 2)[0]
				default:
					got = "" // "(empty: ...)", "(the bound address)", "hostname:gossip-port"
				}
				if got != want {
					t.Errorf("%s: the table says --%s defaults to %q; rlnode -help says %q", name, f, got, want)
				}
			}
		}
		if name == "docs/configuration.md" {
			for f := range defaults {
				if !listed[f] {
					t.Errorf("docs/configuration.md does not list --%s", f)
				}
			}
		}
		flat := spaceRE.ReplaceAllString(doc, " ")
		for _, m := range defaultParenR.FindAllStringSubmatch(flat, -1) {
			prose++
			if want := defaults[m[1]]; m[2] != want {
				t.Errorf("%s: %q says --%s defaults to %q; rlnode -help says %q", name, m[0], m[1], m[2], want)
			}
		}
		for _, re := range []*regexp.Regexp{defaultNumRE, defaultByRE} {
			for _, m := range re.FindAllStringSubmatch(flat, -1) {
				prose++
				got := strings.ReplaceAll(m[2], ",", "") + m[3]
				if want := defaults[m[1]]; got != want {
					t.Errorf("%s: %q says --%s defaults to %q; rlnode -help says %q", name, m[0], m[1], got, want)
				}
			}
		}
	}
	if tables < 2 || prose < 5 {
		t.Errorf("found %d flag tables and %d defaults in prose, want at least 2 and 5: is the parsing broken?", tables, prose)
	}
}

// readmeExample is one curl command of the README and the answers it shows.
type readmeExample struct {
	line    string // the command
	port    string // the port the README's node listens on
	method  string
	path    string
	body    string
	query   url.Values
	repeat  int // for i in $(seq N)
	keep    int // | tail -n M
	answers []string
}

var (
	curlRE      = regexp.MustCompile(`(?m)(^|\s)curl `)
	curlURLRE   = regexp.MustCompile(`http://127\.0\.0\.1:(\d+)(/[^\s;'"]+)`)
	curlBodyRE  = regexp.MustCompile(`-d '([^']*)'`)
	curlParamRE = regexp.MustCompile(`--data-urlencode '([^=']+)=([^']*)'`)
	seqRE       = regexp.MustCompile(`for i in \$\(seq (\d+)\)`)
	forListRE   = regexp.MustCompile(`for i in ((?:\d+ )+)?\d+; do`)
	tailRE      = regexp.MustCompile(`\| tail -n (\d+)`)
)

// readmeSection returns the README's section under heading (a level-2
// heading, "## The API"), from that line to the next level-2 heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	section := readme[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	return section
}

// readmeExamples parses the curl commands of the README's section under
// heading (a level-2 heading, "## The API") and the JSON answers shown
// after each.
func readmeExamples(t *testing.T, heading string) []readmeExample {
	t.Helper()
	return parseExamples(t, readmeSection(t, heading))
}

// parseExamples parses the curl commands of a doc's section and the JSON
// answers shown after each.
func parseExamples(t *testing.T, section string) []readmeExample {
	t.Helper()
	var out []readmeExample
	blocks := fenceRE.FindAllStringSubmatch(section, -1)
	for i, blk := range blocks {
		if blk[1] != "sh" || !curlRE.MatchString(blk[2]) {
			continue
		}
		lines := strings.Split(strings.TrimSpace(blk[2]), "\n")
		if len(lines) != 1 {
			t.Fatalf("README: a curl example of several lines, which this test cannot follow:\n%s", blk[2])
		}
		line := lines[0]
		ex := readmeExample{line: line, repeat: 1, method: http.MethodPost}
		m := curlURLRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("README: no http://127.0.0.1:<port> URL in %s", line)
		}
		ex.port, ex.path = m[1], m[2]
		if strings.Contains(line, " -G ") {
			ex.method = http.MethodGet
			ex.query = url.Values{}
			for _, p := range curlParamRE.FindAllStringSubmatch(line, -1) {
				ex.query.Add(p[1], p[2])
			}
		} else if bm := curlBodyRE.FindStringSubmatch(line); bm != nil {
			ex.body = bm[1]
		} else {
			t.Fatalf("README: no -d body or -G parameters in %s", line)
		}
		if sm := seqRE.FindStringSubmatch(line); sm != nil {
			ex.repeat, _ = strconv.Atoi(sm[1])
		} else if fm := forListRE.FindString(line); fm != "" {
			ex.repeat = len(strings.Fields(strings.TrimSuffix(strings.TrimPrefix(fm, "for i in "), "; do")))
		}
		ex.keep = ex.repeat
		if tm := tailRE.FindStringSubmatch(line); tm != nil {
			ex.keep, _ = strconv.Atoi(tm[1])
		}
		if i+1 < len(blocks) && blocks[i+1][1] == "json" {
			ex.answers = strings.Split(strings.TrimSpace(blocks[i+1][2]), "\n")
		}
		out = append(out, ex)
	}
	return out
}

// timeDependent are the answer fields whose values depend on when the
// request is made: their presence is compared, not their values.
var timeDependent = map[string]bool{"resetAfter": true, "retryAfter": true, "bucket": true, "elapsedMs": true, "previousWeight": true, "age": true, "durationUntilReset": true, "resetAt": true}

// compareJSON appends to diffs where got differs from the README's want.
func compareJSON(diffs *[]string, path string, want, got any) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s = %v, want an object", path, got))
			return
		}
		var wk, gk []string
		for k := range w {
			wk = append(wk, k)
		}
		for k := range g {
			gk = append(gk, k)
		}
		sort.Strings(wk)
		sort.Strings(gk)
		if !reflect.DeepEqual(wk, gk) {
			*diffs = append(*diffs, fmt.Sprintf("%s has fields %v, the README shows %v", path, gk, wk))
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				continue
			}
			switch {
			case k == "retryAfter":
				// Zero exactly when the README's is: allowed answers wait for nothing.
				if (wv == "0s") != (gv == "0s") {
					*diffs = append(*diffs, fmt.Sprintf("%s.retryAfter = %v, the README shows %v", path, gv, wv))
				}
			case timeDependent[k]:
			default:
				compareJSON(diffs, path+"."+k, wv, gv)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			*diffs = append(*diffs, fmt.Sprintf("%s = %v, the README shows %d elements", path, got, len(w)))
			return
		}
		for i := range w {
			compareJSON(diffs, path+"["+strconv.Itoa(i)+"]", w[i], g[i])
		}
	default:
		if !reflect.DeepEqual(want, got) {
			*diffs = append(*diffs, fmt.Sprintf("%s = %v, the README shows %v", path, got, want))
		}
	}
}

// TestREADMEExamples runs the README's API examples, in order, against an
// in-process node on the default in-memory store, as the quick start does,
// and compares each answer with the one the README shows.
func TestREADMEExamples(t *testing.T) {
	examples := readmeExamples(t, "## The API")
	var shown []string
	for _, ex := range examples {
		if len(ex.answers) > 0 {
			shown = append(shown, ex.path)
		}
	}
	for _, want := range []string{"/Check", "/Peek", "/CheckBatch"} {
		if !slices.ContainsFunc(shown, func(p string) bool { return strings.HasSuffix(p, want) }) {
			t.Errorf("the README's API section shows no answer of %s (examples with answers: %v)", want, shown)
		}
	}
	now := earlyInMinute()
	n := startNodeWithClock(t, nil, env(map[string]string{"RLNODE_LISTEN": "127.0.0.1:0"}), now)
	if got := runExamples(t, n.base, examples); got < 6 {
		t.Errorf("compared %d answers with the README's, want at least 6", got)
	}
	checkDecidesAt(t, n.base, now)
}

// TestREADMEEnvoyExample asks the README's Envoy question of a node that
// serves the messaging domain shown in docs/rules.md, started as the README
// starts it, and compares the answer with the README's.
func TestREADMEEnvoyExample(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join("..", "..", "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	var domain string
	for _, b := range fenceRE.FindAllStringSubmatch(string(rules), -1) {
		if b[1] == "yaml" && strings.HasPrefix(b[2], "domain: messaging\n") {
			domain = b[2]
		}
	}
	if domain == "" {
		t.Fatal("docs/rules.md shows no messaging domain")
	}
	dir := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "messaging.yaml"), []byte(domain), 0o600); err != nil {
		t.Fatal(err)
	}

	examples := readmeExamples(t, "## Use with Envoy")
	// The node starts with the README's flags, bar the listen address.
	var args []string
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(b)[strings.Index(string(b), "\n## Use with Envoy\n"):]
	m := regexp.MustCompile(`go run \./cmd/rlnode (.*)`).FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the README's Envoy section does not start a node")
	}
	fields := strings.Fields(m[1])
	for i := 0; i < len(fields); i++ {
		switch fields[i] {
		case "--listen":
			i++
		case "--rules":
			args = append(args, "--rules", dir)
			i++
		default:
			args = append(args, fields[i])
		}
	}
	args = append(args, "--listen", "127.0.0.1:0")
	n := startNode(t, args, env(nil))
	if got := runExamples(t, n.base, examples); got != 1 {
		t.Errorf("compared %d answers with the README's Envoy section, want 1", got)
	}
}

// earlyInMinute returns a clock that starts 5 s into the next minute and
// runs at the real rate: the examples use one-minute windows, and no
// bucket boundary may pass while they run.
func earlyInMinute() func() time.Time {
	start := time.Now()
	at := start.Truncate(time.Minute).Add(time.Minute + 5*time.Second)
	return func() time.Time { return at.Add(time.Since(start)) }
}

// checkDecidesAt fails t unless the node at base decides at the instants
// now gives: a Check's elapsedMs (its offset into a one-minute bucket)
// lies between now's offsets before and after it.
func checkDecidesAt(t *testing.T, base string, now func() time.Time) {
	t.Helper()
	before := now().UnixMilli() % 60_000
	code, body := post(t, base+"/ratelimit.v1.RateLimitService/Check", `{"key":"readme-clock","limit":{"limit":10,"window":"60s"}}`)
	after := now().UnixMilli() % 60_000
	var resp struct {
		Stats struct {
			ElapsedMs int64 `json:",string"`
		}
	}
	if err := json.Unmarshal([]byte(body), &resp); code != http.StatusOK || err != nil {
		t.Fatalf("Check = %d %s (%v)", code, body, err)
	}
	if got := resp.Stats.ElapsedMs; got < before || got > after {
		t.Errorf("Check decided %d ms into its bucket, want %d to %d (the node's clock)", got, before, after)
	}
}

// runExamples sends each example to the node at base and compares the
// answers with the ones shown; it returns how many it compared.
func runExamples(t *testing.T, base string, examples []readmeExample) int {
	t.Helper()
	return runExamplesOn(t, func(string) string { return base }, 0, examples)
}

// runExamplesOn sends each example to the node baseFor(its port) and
// compares the answers with the ones shown; it returns how many it
// compared. A Peek, which changes nothing, is asked again until its answer
// matches or settle has passed (replication from another region takes a
// flush and a network delay).
func runExamplesOn(t *testing.T, baseFor func(port string) string, settle time.Duration, examples []readmeExample) int {
	t.Helper()
	compared := 0
	for _, ex := range examples {
		base := baseFor(ex.port)
		var errs, diffs []string
		var n int
		polltest.Poll(settle, func() bool {
			errs, diffs, n = runExample(t, base, ex)
			return len(diffs) == 0 || !strings.HasSuffix(ex.path, "/Peek")
		})
		for _, e := range errs {
			t.Error(e)
		}
		for _, d := range diffs {
			t.Errorf("%s: %s", ex.line, d)
		}
		compared += n
	}
	return compared
}

// runExample sends ex once to the node at base and compares the answers
// with the ones shown. It returns the problems with the answers, their
// differences from the README's, and how many answers it compared.
func runExample(t *testing.T, base string, ex readmeExample) (errs, diffs []string, compared int) {
	t.Helper()
	var answers []string
	for range ex.repeat {
		var req *http.Request
		var err error
		if ex.method == http.MethodGet {
			req, err = http.NewRequest(http.MethodGet, base+ex.path+"?"+ex.query.Encode(), nil)
		} else {
			req, err = http.NewRequest(http.MethodPost, base+ex.path, strings.NewReader(ex.body))
			req.Header.Set("Content-Type", "application/json")
		}
		if err != nil {
			t.Fatal(err)
		}
		_, b := apitest.Do(t, req)
		answers = append(answers, strings.TrimSpace(b))
	}
	answers = answers[len(answers)-ex.keep:]
	if len(ex.answers) == 0 {
		return nil, nil, 0
	}
	if len(answers) != len(ex.answers) {
		return []string{fmt.Sprintf("%s: %d answers, the README shows %d", ex.line, len(answers), len(ex.answers))}, nil, 0
	}
	for i := range answers {
		var want, got any
		if err := json.Unmarshal([]byte(ex.answers[i]), &want); err != nil {
			errs = append(errs, fmt.Sprintf("the README's answer to %s is not JSON: %v\n%s", ex.line, err, ex.answers[i]))
			continue
		}
		if err := json.Unmarshal([]byte(answers[i]), &got); err != nil {
			errs = append(errs, fmt.Sprintf("%s answered %s: %v", ex.line, answers[i], err))
			continue
		}
		compareJSON(&diffs, "answer", want, got)
		compared++
	}
	return errs, diffs, compared
}

var (
	mdLinkRE   = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)
	headingRE  = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDropRE = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	fencedRE   = regexp.MustCompile("(?s)```.*?```")
)

// anchors returns the GitHub anchors of doc's headings.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(fencedRE.ReplaceAllString(doc, ""), -1) {
		slug := strings.ReplaceAll(slugDropRE.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		out[slug] = true
	}
	return out
}

// TestDocsLinksResolve: every relative link in the README and docs names a
// file or directory of the repository, and every #anchor into a Markdown
// page names one of its headings, so that moving a package, a page or a
// section fails here instead of leaving a dead link.
func TestDocsLinksResolve(t *testing.T) {
	docs := readDocs(t)
	n := 0
	for name, doc := range docs {
		for _, m := range mdLinkRE.FindAllStringSubmatch(doc, -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || (target == "" && anchor == "") {
				continue
			}
			n++
			page := name
			if target != "" {
				page = filepath.ToSlash(filepath.Join(filepath.Dir(name), filepath.FromSlash(target)))
				if _, err := os.Stat(filepath.Join("..", "..", filepath.FromSlash(page))); err != nil {
					t.Errorf("%s links to %s, which does not exist", name, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			targetDoc, ok := docs[page]
			if !ok {
				continue // an anchor into a page these tests do not read
			}
			if !anchors(targetDoc)[anchor] {
				t.Errorf("%s links to %s#%s, which has no such heading", name, page, anchor)
			}
		}
	}
	if n < 30 {
		t.Errorf("found only %d relative links: is the parsing broken?", n)
	}
}

// TestREADMETwoRegions follows the README's two-region recipe: its two
// nodes, started with the README's flags on two real redis-servers (the
// addresses and ports are the test's own), its five Checks in eu and its
// Peek in us, whose answer must be the README's once eu's hits arrive.
func TestREADMETwoRegions(t *testing.T) {
	const heading = "## Multi-region: two regions on one machine"
	var nodes [][]string
	for _, line := range strings.Split(readmeSection(t, heading), "\n") {
		if rest, ok := strings.CutPrefix(line, "go run ./cmd/rlnode "); ok {
			nodes = append(nodes, strings.Fields(rest))
		}
	}
	if len(nodes) != 2 {
		t.Fatalf("the README's two-region recipe starts %d nodes, want 2", len(nodes))
	}
	examples := readmeExamples(t, heading)

	now := earlyInMinute()        // both nodes share it
	bases := map[string]string{}  // the README's listen port -> the node's URL
	gossip := map[string]string{} // the README's gossip address -> the node's
	var started []*node
	for _, args := range nodes {
		var mine []string
		var listenPort, gossipAddr string
		for i := 0; i < len(args); i++ {
			flagName, value := args[i], ""
			if i+1 < len(args) {
				value = args[i+1]
			}
			switch flagName {
			case "--listen":
				_, listenPort, _ = strings.Cut(value, ":")
				mine = append(mine, "--listen", "127.0.0.1:0")
			case "--redis-url":
				mine = append(mine, "--redis-url", redistest.Start(t).URL())
			case "--gossip-addr":
				gossipAddr = value
				mine = append(mine, "--gossip-addr", "127.0.0.1:0")
			case "--join":
				real, ok := gossip[value]
				if !ok {
					t.Fatalf("the README joins %s, which no earlier node binds", value)
				}
				mine = append(mine, "--join", real)
			default:
				mine = append(mine, flagName, value)
			}
			i++
		}
		// A long store timeout keeps a busy machine from deciding in the
		// failover's fallback, which would count under another replica;
		// the buckets follow the test's clock, not Redis's.
		mine = append(mine, "--store-timeout", "2s", "--redis-clock=false")
		n := startNodeWithClock(t, mine, env(nil), now)
		started = append(started, n)
		bases[listenPort] = n.base
		if gossipAddr != "" {
			m := gossipRE.FindStringSubmatch(n.logs.String())
			if m == nil {
				t.Fatalf("the node's logs lack its gossip address:\n%s", n.logs)
			}
			gossip[gossipAddr] = m[1]
		}
	}
	defer stopNodes(started...)
	checkDecidesAt(t, started[0].base, now)
	got := runExamplesOn(t, func(port string) string {
		base, ok := bases[port]
		if !ok {
			t.Fatalf("the README asks port %s, where no node of its recipe listens", port)
		}
		return base
	}, 15*time.Second, examples)
	if got != 1 {
		t.Errorf("compared %d answers with the README's two-region recipe, want 1", got)
	}
}
