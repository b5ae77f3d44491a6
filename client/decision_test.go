package client

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// TestDecisionCarriesStats converts every field of a response, including
// a remote region's age, which an in-process node of one region never
// reports.
func TestDecisionCarriesStats(t *testing.T) {
	resp := &ratelimitv1.CheckResponse{
		Allowed:    true,
		Limit:      10,
		Remaining:  4,
		ResetAfter: durationpb.New(54 * time.Second),
		Stats: &ratelimitv1.WindowStats{
			Bucket:         29923489,
			Current:        5,
			Previous:       2,
			PreviousWeight: 0.5,
			Estimate:       5,
			Regions: []*ratelimitv1.RegionCount{
				{Region: "eu", Current: 5, Previous: 2, Age: durationpb.New(2080 * time.Millisecond)},
				{Region: "us"},
			},
		},
		Shadow: true,
		Scope:  ratelimitv1.Scope_SCOPE_REGION,
	}
	want := Decision{
		Allowed:    true,
		Limit:      10,
		Remaining:  4,
		ResetAfter: 54 * time.Second,
		Shadow:     true,
		Scope:      ScopeRegion,
		Stats: Stats{
			Bucket:         29923489,
			Current:        5,
			Previous:       2,
			PreviousWeight: 0.5,
			Estimate:       5,
			Regions: []RegionCount{
				{Region: "eu", Current: 5, Previous: 2, Age: 2080 * time.Millisecond, HasAge: true},
				{Region: "us"},
			},
		},
	}
	if got := decision(resp); !reflect.DeepEqual(got, want) {
		t.Errorf("decision() = %+v, want %+v", got, want)
	}
	if got := decision(&ratelimitv1.CheckResponse{}); !reflect.DeepEqual(got, Decision{}) {
		t.Errorf("decision(empty) = %+v, want the zero Decision", got)
	}
}
