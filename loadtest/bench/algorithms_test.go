package main

import (
	"strings"
	"testing"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

func TestParseEvalsha(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_hgetall:calls=3,usec=9,usec_per_call=3.00\r\ncmdstat_evalsha:calls=1200,usec=54321,usec_per_call=45.27,rejected_calls=0,failed_calls=0\r\n"
	if calls, usec := parseEvalsha(info); calls != 1200 || usec != 54321 {
		t.Errorf("parseEvalsha() = %d, %d; want 1200, 54321", calls, usec)
	}
	if calls, usec := parseEvalsha("# Commandstats\r\n"); calls != 0 || usec != 0 {
		t.Errorf("parseEvalsha(none) = %d, %d; want 0, 0", calls, usec)
	}
}

func TestAlgorithmFlags(t *testing.T) {
	c, err := parseFlags([]string{"-algorithms", "sliding_window,sliding_window_two_bucket", "-algorithm-rounds", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Algorithms, ","); got != "sliding_window,sliding_window_two_bucket" || c.AlgorithmRounds != 2 {
		t.Errorf("Algorithms = %q, rounds %d", got, c.AlgorithmRounds)
	}
	for _, args := range [][]string{{"-algorithms", "token_bucket"}, {"-algorithms", "sliding_window", "-algorithm-rounds", "0"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) = nil error, want one", args)
		}
	}
	w := newAlgorithmWorkload("steady100", "p", ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW_TWO_BUCKET)
	if w.Len() != steadyKeys || !strings.Contains(string(w.json[0]), `"algorithm":"ALGORITHM_SLIDING_WINDOW_TWO_BUCKET"`) || !strings.Contains(string(w.json[0]), `"window":"1s"`) {
		t.Errorf("steady100 workload: %d requests, first %s", w.Len(), w.json[0])
	}
}
