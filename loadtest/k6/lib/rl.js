// Shared helpers for the rlcluster k6 scripts: targets, the Check call over
// the Connect JSON API, per-bucket admitted counters and the summary.
import http from 'k6/http';
import { Counter, Rate, Trend } from 'k6/metrics';

// TARGETS: "us=http://a:8080|http://b:8080;eu=...;ap=...". The default is the
// compose demo's ports published on 127.0.0.1.
const DEFAULT_TARGETS =
  'us=http://127.0.0.1:8111|http://127.0.0.1:8112;' +
  'eu=http://127.0.0.1:8121|http://127.0.0.1:8122;' +
  'ap=http://127.0.0.1:8131|http://127.0.0.1:8132';

export function targets() {
  const out = {};
  for (const part of (__ENV.TARGETS || DEFAULT_TARGETS).split(';')) {
    const [region, urls] = part.split('=');
    if (region && urls) out[region.trim()] = urls.split('|').map((u) => u.trim()).filter(Boolean);
  }
  return out;
}

export function num(name, def) {
  const v = __ENV[name];
  return v === undefined || v === '' ? def : Number(v);
}

// knobs reads each of defaults' names from the environment as num does:
// knobs({ LIMIT: 300 }) is { LIMIT: num('LIMIT', 300) }.
export function knobs(defaults) {
  const out = {};
  for (const [name, def] of Object.entries(defaults)) out[name] = num(name, def);
  return out;
}

// TG and REGIONS: the run's targets (TARGETS) and their regions.
export const TG = targets();
export const REGIONS = Object.keys(TG);

// options returns a script's k6 options: its scenarios, its thresholds
// plus the one every script holds (at most 1% of calls without a
// decision), and the summary's trend statistics.
export function options(scenarios, thresholds) {
  return {
    scenarios,
    thresholds: Object.assign({ rl_errors: ['rate<0.01'] }, thresholds),
    summaryTrendStats: ['min', 'med', 'p(95)', 'p(99)', 'max'],
  };
}

// p99Below is the threshold on a decision latency's p99, in ms.
export function p99Below(ms) {
  return [`p(99)<${ms}`];
}

export const admitted = new Counter('admitted'); // tags: region, bucket
export const denied = new Counter('denied');
export const rlErrors = new Rate('rl_errors'); // share of calls without a decision
export const latency = new Trend('decision_latency', true);

const PATH = '/ratelimit.v1.RateLimitService/Check';
const PARAMS = { headers: { 'Content-Type': 'application/json' }, timeout: '5s' };

let rr = 0;
// pick returns a node URL of region, round-robin per VU.
export function pick(tg, region) {
  const urls = tg[region];
  rr = (rr + 1) % urls.length;
  return urls[rr];
}

// body builds the Check request (uint64 fields may be numbers in JSON).
export function body(key, hits, limit, windowS) {
  return JSON.stringify({ key, hits, limit: { limit, window: `${windowS}s` } });
}

// record turns one response into metrics and returns
// {ok, allowed, bucket, json}. tags are added to every sample.
export function record(res, region, tags) {
  const t = Object.assign({ region }, tags || {});
  latency.add(res.timings.duration, t);
  let json = null;
  if (res.status === 200) {
    try {
      json = res.json();
    } catch (e) {
      json = null;
    }
  }
  if (!json) {
    rlErrors.add(1, t);
    return { ok: false, allowed: false, bucket: '', json: null, status: res.status };
  }
  rlErrors.add(0, t);
  const bucket = json.stats && json.stats.bucket !== undefined ? String(json.stats.bucket) : '';
  const allowed = json.allowed === true; // proto3 JSON omits false
  if (allowed) admitted.add(1, Object.assign({ bucket }, t));
  else denied.add(1, t);
  return { ok: true, allowed, bucket, json, status: res.status };
}

export function check(tg, region, key, hits, limit, windowS, tags) {
  const res = http.post(pick(tg, region) + PATH, body(key, hits, limit, windowS), PARAMS);
  return record(res, region, tags);
}

// batchRequests returns n http.batch entries for one region.
export function batchRequests(tg, region, n, key, hits, limit, windowS) {
  const reqs = [];
  for (let i = 0; i < n; i++) {
    reqs.push(['POST', pick(tg, region) + PATH, body(key, hits, limit, windowS), PARAMS]);
  }
  return reqs;
}

// bucketThresholds declares one admitted{bucket:b} submetric per bucket the
// run can touch (so handleSummary sees per-window counts) with a threshold
// that fails the run when a window admits more than limit*(1+overPct/100).
// Per-region submetrics are declared with a no-op threshold for the report.
export function bucketThresholds(limit, windowS, runS, regions, overPct, tagFilter) {
  const th = {};
  const now = Date.now() / 1000;
  const first = Math.floor(now / windowS);
  const last = Math.floor((now + runS + 60) / windowS);
  const extra = tagFilter ? `,${tagFilter}` : '';
  const max = Math.floor(limit * (1 + overPct / 100));
  for (let b = first; b <= last; b++) {
    th[`admitted{bucket:${b}${extra}}`] = [`count<=${max}`];
    for (const r of regions) th[`admitted{bucket:${b},region:${r}${extra}}`] = ['count>=0'];
  }
  return th;
}

function pct(v, p) {
  return v && v[`p(${p})`] !== undefined ? v[`p(${p})`] : null;
}

// windows extracts {bucket: {total, regions:{r: n}}} from the summary data.
export function windows(data, tagFilter) {
  const out = {};
  const extra = tagFilter ? `,${tagFilter}` : '';
  for (const [name, m] of Object.entries(data.metrics)) {
    let g = name.match(/^admitted\{bucket:(\d+)(,[^}]*)?\}$/);
    if (!g) continue;
    const rest = g[2] || '';
    const rm = rest.match(/^,region:([a-z0-9_-]+)(.*)$/);
    const tail = rm ? rm[2] : rest;
    if (tail !== extra) continue;
    const b = g[1];
    const n = m.values.count || 0;
    out[b] = out[b] || { total: 0, regions: {} };
    if (rm) out[b].regions[rm[1]] = n;
    else out[b].total = n;
  }
  for (const b of Object.keys(out)) if (out[b].total === 0) delete out[b];
  return out;
}

// summarize builds the report object shared by every script.
export function summarize(data, name, cfg) {
  const lat = data.metrics.decision_latency ? data.metrics.decision_latency.values : {};
  const wins = windows(data, cfg.tagFilter);
  const perWindow = Object.keys(wins)
    .sort()
    .map((b) => {
      const w = wins[b];
      const over = Math.max(0, w.total - cfg.limit);
      return {
        bucket: Number(b),
        start: new Date(Number(b) * cfg.windowS * 1000).toISOString(),
        admitted: w.total,
        byRegion: w.regions,
        overAdmissionPct: cfg.limit > 0 ? (100 * over) / cfg.limit : 0,
      };
    });
  const perRegion = {};
  for (const w of perWindow) for (const [r, n] of Object.entries(w.byRegion)) perRegion[r] = (perRegion[r] || 0) + n;
  const errs = data.metrics.rl_errors ? data.metrics.rl_errors.values : { rate: 0, passes: 0, fails: 0 };
  const thresholdsFailed = Object.entries(data.metrics)
    .filter(([, m]) => m.thresholds && Object.values(m.thresholds).some((t) => !t.ok))
    .map(([n]) => n);
  return Object.assign(
    {
      scenario: name,
      limit: cfg.limit,
      windowSeconds: cfg.windowS,
      overAdmissionBoundPct: cfg.overPct,
      p99BoundMs: cfg.p99Ms,
      admittedPerRegion: perRegion,
      admittedPerWindow: perWindow,
      maxOverAdmissionPct: perWindow.reduce((m, w) => Math.max(m, w.overAdmissionPct), 0),
      latencyMs: { p50: pct(lat, 50) ?? lat.med ?? null, p95: pct(lat, 95), p99: pct(lat, 99), max: lat.max ?? null },
      requests: data.metrics.http_reqs ? data.metrics.http_reqs.values.count : 0,
      errors: errs.passes || 0,
      errorRate: errs.rate || 0,
      thresholdsFailed,
      passed: thresholdsFailed.length === 0,
    },
    cfg.extra || {},
  );
}

function f(v, d) {
  return v === null || v === undefined ? '-' : Number(v).toFixed(d === undefined ? 2 : d);
}

export function text(s) {
  const lines = [];
  lines.push(`rlcluster k6 ${s.scenario}: ${s.passed ? 'PASS' : 'FAIL'}`);
  lines.push(`  limit ${s.limit} per ${s.windowSeconds}s; bounds: over-admission <= ${s.overAdmissionBoundPct}%, p99 <= ${s.p99BoundMs} ms`);
  lines.push(`  requests ${s.requests}, errors ${s.errors} (${f(100 * s.errorRate)}%)`);
  lines.push(`  decision latency ms: p50 ${f(s.latencyMs.p50)} p95 ${f(s.latencyMs.p95)} p99 ${f(s.latencyMs.p99)} max ${f(s.latencyMs.max)}`);
  lines.push(`  admitted per region: ${Object.entries(s.admittedPerRegion).map(([r, n]) => `${r}=${n}`).join(' ') || '-'}`);
  lines.push('  admitted per window (global, by region, over-admission % of limit):');
  for (const w of s.admittedPerWindow) {
    const regs = Object.entries(w.byRegion).map(([r, n]) => `${r}=${n}`).join(' ');
    lines.push(`    ${w.start} bucket ${w.bucket}: ${w.admitted} (${regs}) over ${f(w.overAdmissionPct, 1)}%`);
  }
  lines.push(`  max over-admission ${f(s.maxOverAdmissionPct, 1)}%`);
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x_')) lines.push(`  ${k.slice(2)}: ${typeof v === 'object' ? JSON.stringify(v) : v}`);
  }
  if (s.thresholdsFailed.length) lines.push(`  thresholds failed: ${s.thresholdsFailed.join(', ')}`);
  return lines.join('\n') + '\n';
}

// report is the body of every script's handleSummary.
export function report(data, name, cfg) {
  const s = summarize(data, name, cfg);
  const dir = __ENV.RESULTS_DIR || '.';
  const out = { stdout: text(s) };
  out[`${dir}/${name}-summary.json`] = JSON.stringify(s, null, 2);
  out[`${dir}/${name}-summary.txt`] = text(s);
  return out;
}
