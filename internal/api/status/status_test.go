package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rlcluster/rlcluster/internal/api/status"
)

// TestStatusSaysWhyNotReady: /status.json carries /readyz's verdict and,
// when not ready, its reason.
func TestStatusSaysWhyNotReady(t *testing.T) {
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	var why error
	p := status.New(status.Config{Region: "eu", Now: now, Ready: func(context.Context) error { return why }})
	get := func() status.Status {
		rec := httptest.NewRecorder()
		p.ServeJSON(rec, httptest.NewRequest("GET", "/status.json", nil))
		var st status.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("status.json: %v: %s", err, rec.Body)
		}
		return st
	}
	if st := get(); !st.Ready || st.NotReady != "" {
		t.Errorf("ready node: ready=%v not_ready=%q, want true and empty", st.Ready, st.NotReady)
	}
	why = errors.New("gossip: no other region reachable: check --join and --gossip-key")
	if st := get(); st.Ready || st.NotReady != why.Error() {
		t.Errorf("cut-off node: ready=%v not_ready=%q, want false and %q", st.Ready, st.NotReady, why)
	}
	// Without a Ready check the node is ready.
	if st := status.New(status.Config{Region: "eu", Now: now}).Status(context.Background()); !st.Ready {
		t.Error("no Ready check: not ready")
	}
}
