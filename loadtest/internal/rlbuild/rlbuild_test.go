package rlbuild

import "testing"

func TestFreePortsDistinct(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Errorf("FreePorts(3) = %v, want three distinct ports", ports)
		}
		seen[p] = true
	}
}
