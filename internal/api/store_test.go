package api_test

import (
	"testing"

	"github.com/rlcluster/rlcluster/internal/region"
)

// stores are the stores the acceptance tests run against.
var stores = []struct {
	name string
	new  func(t *testing.T) region.Store
}{
	{"memory", func(t *testing.T) region.Store { return region.NewMemory(region.MemoryConfig{}) }},
}
