package guard

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlcluster/rlcluster/internal/window"
)

// TestAlertsNameRealMetrics: every rlcluster_remote_* or rlcluster_guard_*
// metric the demo's alerts and dashboard query is one a Node exports,
// with the labels the queries group by, so that a renamed metric or label
// cannot leave a silent alert or an empty panel.
func TestAlertsNameRealMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := View{Region: "a", Alive: []string{"a", "b"}, Nodes: 1, Horizon: 80 * time.Millisecond,
		Ages: map[string]time.Duration{"b": 30 * time.Millisecond}}
	n, err := NewNode(New(Config{}), func(time.Time) View { return v }, reg)
	if err != nil {
		t.Fatal(err)
	}
	n.Admit(t0, "k", window.Limit{Limit: 10, Window: time.Minute}, 1)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]map[string]bool{} // series name -> label names
	for _, f := range families {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		name := f.GetName()
		known[name] = labels
		if f.GetType().String() == "HISTOGRAM" {
			withLe := map[string]bool{"le": true}
			for l := range labels {
				withLe[l] = true
			}
			known[name+"_bucket"], known[name+"_sum"], known[name+"_count"] = withLe, labels, labels
		}
	}
	if got := known["rlcluster_remote_staleness_seconds_bucket"]; !got["region"] || !got["le"] {
		t.Fatalf("rlcluster_remote_staleness_seconds_bucket has labels %v, want region and le", got)
	}
	used := 0
	re := regexp.MustCompile(`rlcluster_(?:remote|guard)_[a-z_]+`)
	for _, file := range []string{"alerts.yml", "grafana/dashboards/rlcluster.json"} {
		b, err := os.ReadFile("../../deploy/multiregion/" + file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range re.FindAllString(string(b), -1) {
			used++
			if known[name] == nil {
				t.Errorf("%s queries %s, which a guard Node does not export", file, name)
			}
		}
	}
	alerts, err := os.ReadFile("../../deploy/multiregion/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`rate\(rlcluster_remote_staleness_seconds_bucket\[`).Match(alerts) {
		t.Error("alerts.yml does not alert on rlcluster_remote_staleness_seconds")
	}
	if used == 0 {
		t.Error("neither the alerts nor the dashboard query a guard metric")
	}
}
