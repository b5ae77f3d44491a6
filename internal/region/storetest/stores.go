package storetest

import (
	"context"
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
)

// Open opens the store stack cfg describes with [region.Open], as rlnode
// does, and closes it when t ends.
func Open(t testing.TB, cfg region.Config) *region.Stack {
	t.Helper()
	s, err := region.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("region.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Down is a store whose every call but Close fails with Err, as a Redis
// that went away does.
type Down struct{ Err error }

var _ region.Store = Down{}

// Check returns d.Err.
func (d Down) Check(context.Context, []region.Request, []region.Result) error { return d.Err }

// Merge returns d.Err.
func (d Down) Merge(context.Context, []region.Total) error { return d.Err }

// Vectors returns d.Err.
func (d Down) Vectors(context.Context, []region.BucketRef) ([][]region.Total, error) {
	return nil, d.Err
}

// Close returns nil.
func (Down) Close() error { return nil }
