package window

import "testing"

// TestMix64 checks the mixer against SplitMix64's published sequence: the
// generator seeded with 0 returns the mixes of 0x9e3779b97f4a7c15 and of
// twice it (mod 2^64).
func TestMix64(t *testing.T) {
	for _, c := range []struct{ in, want uint64 }{
		{0x9e3779b97f4a7c15, 0xe220a8397b1dcdaf},
		{0x3c6ef372fe94f82a, 0x6e789e6aa1b965f4},
		{0, 0},
	} {
		if got := Mix64(c.in); got != c.want {
			t.Errorf("Mix64(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
}
