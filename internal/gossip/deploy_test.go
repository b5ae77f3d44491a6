package gossip

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const multiregion = "../../deploy/multiregion/"

// promtool returns the path of Prometheus's promtool (Debian's prometheus
// package; .ci/run installs it). Without it the test is skipped, except
// in CI (RLCLUSTER_REQUIRE_REDIS=1), where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("RLCLUSTER_REQUIRE_REDIS") == "1" {
			t.Fatal("promtool not found: apt-get install prometheus")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	return p
}

// TestAlertRules: the example alert rules are valid, the demo's
// Prometheus config loads them, and their unit tests (alerts_test.yml:
// over-admission above 1.05 for 10 minutes fires, a region unheard for
// seconds fires, one heard does not) pass.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"check", "config", "prometheus.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = multiregion
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cfg, err := os.ReadFile(multiregion + "prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "rule_files: [alerts.yml]") {
		t.Error("prometheus.yml does not load alerts.yml")
	}
}

// TestDashboardAndAlertsNameRealMetrics: every rlcluster_accuracy_* or
// rlcluster_gossip_* metric the dashboard and the alerts query is one
// the node exports, so a renamed metric cannot leave an empty panel or
// a silent alert.
func TestDashboardAndAlertsNameRealMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := &Node{met: newMetrics()}
	n.met.node = n
	acc := &Accuracy{n: n}
	ratio, unobserved := newAccuracyMetrics()
	acc.ratio, acc.unobserved = ratio, unobserved
	reg.MustRegister(acc.Collectors()...)
	ratio.WithLabelValues("x").Observe(1)
	unobserved.WithLabelValues("full")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		known[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			known[name+"_bucket"], known[name+"_sum"], known[name+"_count"] = true, true, true
		}
	}
	for _, d := range describe(n.Collectors()) {
		if m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d); m != nil {
			known[m[1]] = true
		}
	}

	var exprs []string
	b, err := os.ReadFile(multiregion + "grafana/dashboards/rlcluster.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	accuracyPanel := false
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			if strings.Contains(tg.Expr, "rlcluster_accuracy_admitted_ratio_bucket") {
				accuracyPanel = true
			}
		}
	}
	if !accuracyPanel {
		t.Error("the dashboard has no panel on rlcluster_accuracy_admitted_ratio")
	}
	alerts, err := os.ReadFile(multiregion + "alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs = append(exprs, string(alerts))
	re := regexp.MustCompile(`rlcluster_(?:accuracy|gossip)_[a-z_]+`)
	for _, e := range exprs {
		for _, name := range re.FindAllString(e, -1) {
			if !known[name] {
				t.Errorf("%q queries %s, which no collector exports", e, name)
			}
		}
	}
}

// describe returns the descriptions of cs' metrics as strings.
func describe(cs []prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []string
	for d := range ch {
		out = append(out, d.String())
	}
	return out
}
