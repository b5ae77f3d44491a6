package api_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMESnippetsMatchDeploy keeps the README's nginx and Traefik
// snippets excerpts of the files under deploy/: every snippet line is a
// line of the file.
func TestREADMESnippetsMatchDeploy(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		lang, marker, file string // snippets in lang that contain marker
	}{
		{"nginx", "auth_request", "../../deploy/nginx/rlcluster.conf"},
		{"yaml", "forwardAuth:", "../../deploy/traefik/dynamic.yml"},
	} {
		file, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(string(file), "\n") {
			lines[strings.TrimSpace(l)] = true
		}
		var blocks [][]string
		for _, b := range regexp.MustCompile("(?s)```"+tt.lang+"\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
			if strings.Contains(b[1], tt.marker) {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			t.Errorf("README has no %s snippet with %q", tt.lang, tt.marker)
		}
		for _, b := range blocks {
			for _, l := range strings.Split(b[1], "\n") {
				if l = strings.TrimSpace(l); l != "" && !lines[l] {
					t.Errorf("README's %s snippet line %q is not in %s", tt.lang, l, tt.file)
				}
			}
		}
	}
}
