package main

import (
	"sync"
	"time"
)

// held is one packet waiting for its verdict.
type held struct {
	id  uint32
	due time.Time
}

// fifo is a growable ring of held packets. Within one fifo every packet has
// the same delay, so due times never decrease from head to tail and a FIFO
// keeps both ordering and release time exact.
type fifo struct {
	buf        []held
	head, size int
}

func (q *fifo) push(h held) {
	if q.size == len(q.buf) {
		n := 2 * len(q.buf)
		if n == 0 {
			n = 64
		}
		nb := make([]held, n)
		for i := 0; i < q.size; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = h
	q.size++
}

func (q *fifo) peek() (held, bool) {
	if q.size == 0 {
		return held{}, false
	}
	return q.buf[q.head], true
}

func (q *fifo) pop() held {
	h := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return h
}

// scheduler holds packets in one FIFO per directed path and hands out the
// ones whose time has come. It is safe for concurrent use; time is a
// parameter so it can be tested without clocks. One goroutine (see
// [releaser]) waits for [scheduler.next] and releases [scheduler.due].
type scheduler struct {
	mu     sync.Mutex
	queues []fifo
	wake   chan struct{}
}

func newScheduler(paths int) *scheduler {
	return &scheduler{queues: make([]fifo, paths), wake: make(chan struct{}, 1)}
}

// add holds packet id on path until now+delay.
func (s *scheduler) add(path int, id uint32, now time.Time, delay time.Duration) {
	s.mu.Lock()
	q := &s.queues[path]
	q.push(held{id: id, due: now.Add(delay)})
	first := q.size == 1
	s.mu.Unlock()
	if first {
		select { // the releaser may be waiting on a later deadline
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// due appends to dst the ids whose due time is not after now, in order per
// path, removes them, and returns dst.
func (s *scheduler) due(now time.Time, dst []uint32) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.queues {
		q := &s.queues[i]
		for {
			h, ok := q.peek()
			if !ok || h.due.After(now) {
				break
			}
			dst = append(dst, q.pop().id)
		}
	}
	return dst
}

// next returns the earliest due time of any held packet.
func (s *scheduler) next() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t time.Time
	found := false
	for i := range s.queues {
		if h, ok := s.queues[i].peek(); ok && (!found || h.due.Before(t)) {
			t, found = h.due, true
		}
	}
	return t, found
}

// held returns how many packets are waiting.
func (s *scheduler) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := range s.queues {
		n += s.queues[i].size
	}
	return n
}

// releaser calls release for every due packet until done is closed, then
// releases everything still held (so no packet is left hanging on exit).
func (s *scheduler) releaser(done <-chan struct{}, now func() time.Time, release func(id uint32)) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var ids []uint32
	for {
		ids = s.due(now(), ids[:0])
		for _, id := range ids {
			release(id)
		}
		wait := time.Hour
		if t, ok := s.next(); ok {
			wait = t.Sub(now())
		}
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-done:
			for _, id := range s.due(time.Unix(1<<40, 0), ids[:0]) {
				release(id)
			}
			return
		case <-s.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}
