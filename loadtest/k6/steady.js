// steady: requests arrive at 3x a global limit, spread evenly over the three
// regions, on one shared key. The limit must hold globally: every window
// admits at most LIMIT*(1+OVER_PCT/100) (documented bound: 10%), and the
// p99 decision latency stays under P99_MS (50 ms).
//
//   k6 run loadtest/k6/steady.js                       # demo ports on 127.0.0.1
//   docker compose run --rm k6 run /scripts/steady.js  # inside the demo
// Env: LIMIT (300) WINDOW (10, seconds) DURATION (40, seconds) OVER_PCT (10)
//      P99_MS (50) KEY (steady-<time>) TARGETS RESULTS_DIR
import { check, knobs, options as rlOptions, p99Below, TG, REGIONS, bucketThresholds, report } from './lib/rl.js';

const { LIMIT, WINDOW, DURATION, OVER_PCT, P99_MS } = knobs({ LIMIT: 300, WINDOW: 10, DURATION: 40, OVER_PCT: 10, P99_MS: 50 });

const scenarios = {};
for (const r of REGIONS) {
  scenarios[`steady_${r}`] = {
    executor: 'constant-arrival-rate',
    // 3x the limit in total: the limit's rate times 3, split over regions.
    rate: Math.max(1, Math.round((3 * LIMIT) / REGIONS.length)),
    timeUnit: `${WINDOW}s`,
    duration: `${DURATION}s`,
    preAllocatedVUs: 10,
    maxVUs: 50,
    env: { REGION: r },
  };
}

export const options = rlOptions(
  scenarios,
  Object.assign({ decision_latency: p99Below(P99_MS) }, bucketThresholds(LIMIT, WINDOW, DURATION, REGIONS, OVER_PCT)),
);

export function setup() {
  return { key: __ENV.KEY || `steady-${Date.now()}` };
}

export default function (data) {
  check(TG, __ENV.REGION, data.key, 1, LIMIT, WINDOW);
}

export function handleSummary(data) {
  return report(data, 'steady', { limit: LIMIT, windowS: WINDOW, overPct: OVER_PCT, p99Ms: P99_MS });
}
