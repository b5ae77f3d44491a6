package gossip

import (
	"slices"
	"testing"
)

func TestRing(t *testing.T) {
	cases := []struct {
		name     string
		capacity int
		push     []int
		oldest   []int // oldestFirst()
	}{
		{"empty", 3, nil, []int{}},
		{"part full", 3, []int{1, 2}, []int{1, 2}},
		{"full", 3, []int{1, 2, 3}, []int{1, 2, 3}},
		{"wrapped once", 3, []int{1, 2, 3, 4}, []int{2, 3, 4}},
		{"wrapped twice", 3, []int{1, 2, 3, 4, 5, 6, 7}, []int{5, 6, 7}},
		{"capacity 0", 0, []int{1, 2}, []int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRing[int](c.capacity)
			for _, v := range c.push {
				r.push(v)
			}
			if got, want := r.oldestFirst(), c.oldest; !slices.Equal(got, want) {
				t.Errorf("oldestFirst() = %v, want %v", got, want)
			}
			if got, want := r.len(), len(c.oldest); got != want {
				t.Fatalf("len() = %d, want %d", got, want)
			}
			for i := range r.len() {
				if got, want := r.newest(i), c.oldest[len(c.oldest)-1-i]; got != want {
					t.Errorf("newest(%d) = %d, want %d", i, got, want)
				}
			}
		})
	}
}
