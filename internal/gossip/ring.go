package gossip

// ring keeps the last cap values pushed into it, for the recent totals
// that push-pull carries and the staleness samples. Make one with newRing;
// it is not safe for concurrent use (its owner locks).
type ring[T any] struct {
	buf  []T
	next int // the oldest value's slot once buf is full
}

func newRing[T any](capacity int) ring[T] { return ring[T]{buf: make([]T, 0, capacity)} }

// push adds v, replacing the oldest value once the ring is full (a ring
// of capacity 0 keeps nothing).
func (r *ring[T]) push(v T) {
	if cap(r.buf) == 0 {
		return
	}
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
}

// len returns how many values the ring holds.
func (r *ring[T]) len() int { return len(r.buf) }

// newest returns the i-th newest value: newest(0) is the last pushed.
func (r *ring[T]) newest(i int) T { return r.buf[(r.next-1-i+2*len(r.buf))%len(r.buf)] }

// oldestFirst returns a copy of the values, oldest first.
func (r *ring[T]) oldestFirst() []T {
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
