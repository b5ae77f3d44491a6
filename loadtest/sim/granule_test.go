package main

import "testing"

// TestRemoteGranules: three regions 60 ms apart offered 10x a limit of
// 1000 per 10 s evenly (evenLoad), without the guard. Under overload the
// window refills in bunches, so one coarse granule of a remote region's
// trail can hold a large part of the limit; its hits count until the
// granule's last one leaves, so a coarse granule of 1/64 of the window
// kept the median trailing window at admissions near 0.94 of the limit.
// Replicated trails in granules of 1/256 (window.Granules) lift it to at
// least 0.98, and no trailing window exceeds the limit by more than 5%.
func TestRemoteGranules(t *testing.T) {
	t.Parallel()
	res := evenLoad()
	st, on := res.Off, res.On
	t.Logf("trailing window at admissions, guard off: median %.3f, p99.9 %.3f, max %.3f; per region %v (guard on: median %.3f, max %.3f)",
		st.Median, st.P999, st.Max, st.PerRegion, on.Median, on.Max)
	if !(st.Median >= 0.98) {
		t.Errorf("median trailing window at admissions %.3f of the limit, want at least 0.98", st.Median)
	}
	if !(st.Max <= 1.05) {
		t.Errorf("max trailing window at admissions %.3f of the limit, want at most 1.05", st.Max)
	}
}
