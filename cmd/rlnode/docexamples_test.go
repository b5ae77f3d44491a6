package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// heredocRE is a rules file a doc writes with cat > name <<'EOF'.
var heredocRE = regexp.MustCompile(`(?s)cat > ([A-Za-z0-9_.-]+\.ya?ml) <<'EOF'\n(.*?)\nEOF\n`)

// docSection returns the section of the doc at path (from the repository's
// root) under heading ("## Calendar windows", any level), up to the next
// heading of the same or a higher level.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no %q section", path, heading)
	}
	section := doc[start+1:]
	level := strings.Index(heading, " ")
	end := regexp.MustCompile(`\n#{1,` + string(rune('0'+level)) + `} `).FindStringIndex(section[1:])
	if end != nil {
		section = section[:end[0]+1]
	}
	return section
}

// runDocSection starts a node with the rules files that the section of
// the doc at path under heading writes (cat > x.yaml <<'EOF' ... EOF),
// runs the section's curl examples against it in order and compares each
// answer with the one shown; it returns how many answers it compared.
func runDocSection(t *testing.T, path, heading string, extraArgs ...string) int {
	t.Helper()
	section := docSection(t, path, heading)
	dir := filepath.Join(t.TempDir(), "rules")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	files := heredocRE.FindAllStringSubmatch(section, -1)
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[1]), []byte(f[2]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"--listen", "127.0.0.1:0"}, extraArgs...)
	if len(files) > 0 {
		args = append(args, "--rules", dir)
	}
	n := startNodeWithClock(t, args, env(nil), earlyInMinute())
	return runExamples(t, n.base, parseExamples(t, section))
}

// TestDocsExamples runs the examples of the docs' feature sections, each
// against a node started with the rules files the section writes, and
// compares the answers with the ones shown.
func TestDocsExamples(t *testing.T) {
	for _, tc := range []struct {
		path, heading string
		answers       int
	}{
		{"docs/rules.md", "## envoyproxy/ratelimit's share_threshold, quota_mode and metadata", 4},
		{"docs/rules.md", "## Token bucket burst", 1},
		{"docs/rules.md", "## Resetting a key", 3},
		{"docs/rules.md", "## Calendar windows", 2},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			if got := runDocSection(t, tc.path, tc.heading); got != tc.answers {
				t.Errorf("compared %d answers with %s's, want %d", got, tc.path, tc.answers)
			}
		})
	}
}
