// burst: a burst timed at a bucket boundary, the classic attack on fixed
// windows (a full limit just before the boundary and another just after).
// The sliding window must admit about one limit over both sides together:
// at most LIMIT*(1 + AFTER_MS/WINDOW + OVER_PCT/100) (the prev-bucket
// weight decays by AFTER_MS/WINDOW before the second half arrives).
// Bounds: OVER_PCT 10%, p99 P99_MS 100 ms (bursts queue).
//
// Env: LIMIT (300) WINDOW (10) BEFORE_MS (300) AFTER_MS (200) VUS (30)
//      OVER_PCT (10) P99_MS (100) TARGETS RESULTS_DIR
import http from 'k6/http';
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';
import { knobs, options as rlOptions, p99Below, TG, REGIONS, batchRequests, record, bucketThresholds, report } from './lib/rl.js';

const { LIMIT, WINDOW, BEFORE_MS, AFTER_MS, VUS, OVER_PCT, P99_MS } = knobs({
  LIMIT: 300, WINDOW: 10, BEFORE_MS: 300, AFTER_MS: 200, VUS: 30, OVER_PCT: 10, P99_MS: 100,
});
// Each side of the boundary sends 2x the limit, split over the VUs.
const PER_VU = Math.ceil((2 * LIMIT) / VUS);
const BOUND = Math.floor(LIMIT * (1 + AFTER_MS / 1000 / WINDOW + OVER_PCT / 100));

const burstAdmitted = new Counter('burst_admitted');

export const options = rlOptions(
  { burst: { executor: 'per-vu-iterations', vus: VUS, iterations: 1, maxDuration: `${3 * WINDOW + 30}s` } },
  Object.assign(
    { burst_admitted: [`count<=${BOUND}`], decision_latency: p99Below(P99_MS) },
    bucketThresholds(LIMIT, WINDOW, 3 * WINDOW, REGIONS, 100 * (BOUND / LIMIT - 1)),
  ),
);

export function setup() {
  // The boundary: the first bucket start at least 3 s away.
  const now = Date.now();
  const w = WINDOW * 1000;
  let t = Math.ceil(now / w) * w;
  if (t - now < 3000) t += w;
  return { key: `burst-${now}`, boundary: t };
}

function sleepUntil(ms) {
  const d = ms - Date.now();
  if (d > 0) sleep(d / 1000);
}

function fire(data, region, phase) {
  const reqs = batchRequests(TG, region, PER_VU, data.key, 1, LIMIT, WINDOW);
  for (const res of http.batch(reqs)) {
    const r = record(res, region, { phase });
    if (r.allowed) burstAdmitted.add(1, { phase });
  }
}

export default function (data) {
  const region = REGIONS[(__VU - 1) % REGIONS.length];
  sleepUntil(data.boundary - BEFORE_MS);
  fire(data, region, 'before');
  sleepUntil(data.boundary + AFTER_MS);
  fire(data, region, 'after');
}

export function handleSummary(data) {
  const b = data.metrics.burst_admitted ? data.metrics.burst_admitted.values.count : 0;
  return report(data, 'burst', {
    limit: LIMIT,
    windowS: WINDOW,
    overPct: OVER_PCT,
    p99Ms: P99_MS,
    extra: {
      burstAdmitted: b,
      burstBound: BOUND,
      x_burst: `admitted ${b} of ${2 * PER_VU * VUS} sent across the boundary (bound ${BOUND}, fixed window would admit ${2 * LIMIT})`,
    },
  });
}
