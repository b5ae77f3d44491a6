// hotkey: one key at 50x its limit, from all regions, while other keys keep
// being asked for. The hot key must stay limited (each window admits at most
// LIMIT*(1+HOT_OVER_PCT/100); bound 25%: over-admission grows with request
// rate x replication lag), and the nodes must stay responsive for the
// other keys: all of them allowed, p99 under P99_MS (50 ms).
//
// Env: LIMIT (100) WINDOW (60) FACTOR (50) DURATION (40) OTHER_RATE (30/s)
//      HOT_OVER_PCT (25) P99_MS (50) TARGETS RESULTS_DIR
import { Counter } from 'k6/metrics';
import { check, knobs, options as rlOptions, p99Below, TG, REGIONS, bucketThresholds, report } from './lib/rl.js';

const { LIMIT, WINDOW, FACTOR, DURATION, OTHER_RATE, HOT_OVER_PCT, P99_MS } = knobs({
  LIMIT: 100, WINDOW: 60, FACTOR: 50, DURATION: 40, OTHER_RATE: 30, HOT_OVER_PCT: 25, P99_MS: 50,
});

const otherDenied = new Counter('other_denied');

const scenarios = {};
for (const r of REGIONS) {
  scenarios[`hot_${r}`] = {
    executor: 'constant-arrival-rate',
    // FACTOR x the limit per window in total, split over the regions.
    rate: Math.max(1, Math.round((FACTOR * LIMIT) / REGIONS.length)),
    timeUnit: `${WINDOW}s`,
    duration: `${DURATION}s`,
    preAllocatedVUs: 10,
    maxVUs: 60,
    exec: 'hot',
    env: { REGION: r },
  };
}
scenarios.other = {
  executor: 'constant-arrival-rate',
  rate: OTHER_RATE,
  timeUnit: '1s',
  duration: `${DURATION}s`,
  preAllocatedVUs: 5,
  maxVUs: 30,
  exec: 'other',
};

export const options = rlOptions(
  scenarios,
  Object.assign(
    {
      'decision_latency{kind:other}': p99Below(P99_MS),
      'decision_latency{kind:hot}': p99Below(P99_MS),
      other_denied: ['count==0'],
    },
    bucketThresholds(LIMIT, WINDOW, DURATION, REGIONS, HOT_OVER_PCT, 'kind:hot'),
  ),
);

export function setup() {
  return { key: `hot-${Date.now()}` };
}

export function hot(data) {
  check(TG, __ENV.REGION, data.key, 1, LIMIT, WINDOW, { kind: 'hot' });
}

let n = 0;
export function other(data) {
  n++;
  const region = REGIONS[(__VU + n) % REGIONS.length];
  const r = check(TG, region, `${data.key}-other-${__VU}-${n}`, 1, 1000, WINDOW, { kind: 'other' });
  if (r.ok && !r.allowed) otherDenied.add(1);
}

export function handleSummary(data) {
  const m = (k) => (data.metrics[k] ? data.metrics[k].values : {});
  return report(data, 'hotkey', {
    limit: LIMIT,
    windowS: WINDOW,
    overPct: HOT_OVER_PCT,
    p99Ms: P99_MS,
    tagFilter: 'kind:hot',
    extra: {
      otherDenied: m('other_denied').count || 0,
      otherP99Ms: m('decision_latency{kind:other}')['p(99)'] ?? null,
      hotP99Ms: m('decision_latency{kind:hot}')['p(99)'] ?? null,
      x_other_keys: `denied ${m('other_denied').count || 0}, p99 ${(m('decision_latency{kind:other}')['p(99)'] ?? 0).toFixed(2)} ms (hot key p99 ${(m('decision_latency{kind:hot}')['p(99)'] ?? 0).toFixed(2)} ms)`,
    },
  });
}
