package window

import (
	"testing"
	"time"
)

func TestDecideLog(t *testing.T) {
	t.Parallel()
	l := Limit{Limit: 5, Window: time.Second, Algorithm: SlidingLog}
	tests := []struct {
		name    string
		log     []LogEntry
		now     int64
		hits    uint64
		allowed bool
		est     uint64
		retry   time.Duration
	}{
		{"empty", nil, 5000, 5, true, 0, 0},
		{"all expired", []LogEntry{{3000, 5}, {4000, 5}}, 5000, 5, true, 0, 0},
		{"boundary live", []LogEntry{{4001, 5}}, 5000, 1, false, 5, time.Millisecond},
		{"drop two of three", []LogEntry{{4100, 1}, {4200, 2}, {4300, 2}}, 4500, 3, false, 5, 700 * time.Millisecond},
		{"same instant", []LogEntry{{4100, 1}, {4100, 1}, {4100, 3}}, 4500, 1, false, 5, 600 * time.Millisecond},
		{"zero-hit entries", []LogEntry{{4100, 0}, {4200, 4}}, 4500, 2, false, 4, 700 * time.Millisecond},
		{"future entry", []LogEntry{{4600, 5}}, 4500, 1, false, 5, 1100 * time.Millisecond},
		{"fits exactly", []LogEntry{{4100, 1}, {4200, 2}}, 4500, 2, true, 3, 0},
		{"too many hits", nil, 4500, 6, false, 0, Never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := l.DecideLog(tt.now, tt.log, tt.hits)
			if d.Allowed != tt.allowed || d.Estimate != tt.est || d.RetryAfter != tt.retry {
				t.Errorf("DecideLog = allowed %v estimate %d retry %v, want %v %d %v", d.Allowed, d.Estimate, d.RetryAfter, tt.allowed, tt.est, tt.retry)
			}
			lim := &logState{l: l, log: tt.log}
			if msg := exactRetry(lim, l, tt.now, tt.hits, d); msg != "" {
				t.Error(msg)
			}
		})
	}
}
