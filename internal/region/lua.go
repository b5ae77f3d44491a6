package region

import "github.com/redis/go-redis/v9"

// The Lua scripts the Redis store runs. Each decision is one EVALSHA.
//
// Redis Lua numbers are doubles, exact for integers up to 2^53. Limits are at
// most 2^53 and a region's count never exceeds the limit by more than one
// request, so every count fits; the sliding estimate floor(prev*f/W) is
// computed exactly by splitting prev and f (see counterScript), and sums that
// could pass 2^53 only ever make a request denied, which the comparisons
// below keep exact.

// A counter bucket is one hash: per region a field named after the region
// holding its count, and for the default sliding window two more fields,
// the region's name followed by the byte 0xFF (never in a region name,
// which is UTF-8) and '0' or '1', holding its early and late half as
// "N:First:Last:Run:Before" (window.Half, decimal).
const halfSep = "\xff"

// counterScript decides a sliding or fixed window request.
//
//	KEYS[1] current bucket hash, KEYS[2] previous bucket hash
//	ARGV    now_ms, window_ms, limit, hits, region, peek (0/1),
//	        mode (0 two-bucket, 1 fixed, 2 spans, 3 spans strict), ttl_ms
//
// In the span modes it decides exactly as window.Limit.DecideSpans on the
// regions' halves (a region's count above its halves' is added to its late
// half as spread over all of it), and an admitted request updates the local
// region's half as window.Half.Add does. It returns {allowed (0/1),
// HGETALL current, HGETALL previous, the estimate}, the hashes read before
// the update; the estimate is "-1" when the current bucket alone denies, and
// at least 2^53 when it passes that.
var counterScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local me = ARGV[5]
local mode = ARGV[7]
local TWO53 = 9007199254740992
local cur = redis.call('HGETALL', KEYS[1])
local prev = redis.call('HGETALL', KEYS[2])
local e = math.fmod(now, W)
local H = (W - math.fmod(W, 2)) / 2
local hk = '0'
if e >= H then hk = '1' end
-- floor(n * f / d) exactly for n < 2^53 and f, d < 2^30: n = A*d + B with
-- B < d, so the result is A*f + floor(B*f/d), and B*f is split into 2^15
-- limbs of f so that every product stays below 2^45.
local function muldiv(n, f, d)
  local B = math.fmod(n, d)
  local A = (n - B) / d
  local fl = math.fmod(f, 32768)
  local fh = (f - fl) / 32768
  local x = B * fh
  local r1 = math.fmod(x, d)
  local q1 = (x - r1) / d
  local y = r1 * 32768 + B * fl
  local r2 = math.fmod(y, d)
  local q2 = (y - r2) / d
  local af = A * f
  if af >= TWO53 then return TWO53 end
  return af + q1 * 32768 + q2
end
local c = 0
local mine, myhalf = 0, nil
for i = 1, #cur, 2 do
  local f = cur[i]
  if string.byte(f, -2) == 255 then
    if mode >= '2' and string.sub(f, -1) == hk and string.sub(f, 1, -3) == me then myhalf = cur[i + 1] end
  else
    local n = tonumber(cur[i + 1])
    c = c + n
    if f == me then mine = n end
  end
end
local cap = limit - hits
local allowed = 0
local est = -1
if c <= cap then
  local wp = 0
  if mode == '0' and #prev > 0 then
    -- f = W - e; wp = floor(P * f / W), P the previous bucket's sum.
    -- The previous bucket's sum P may pass 2^53: P = A*W + B with B < W
    -- summed per region, then wp = A*f + floor(B*f/W).
    local f = W - e
    local A, B = 0, 0
    for i = 1, #prev, 2 do
      if string.byte(prev[i], -2) ~= 255 then
        local p = tonumber(prev[i + 1])
        local b = math.fmod(p, W)
        A = A + (p - b) / W
        B = B + b
      end
    end
    local b2 = math.fmod(B, W)
    A = A + (B - b2) / W
    local af = A * f
    if af >= TWO53 then wp = TWO53 else wp = af + muldiv(b2, f, W) end
  elseif mode >= '2' and #prev > 0 then
    local strict = mode == '3'
    local counts, halves = {}, {}
    for i = 1, #prev, 2 do
      local f = prev[i]
      if string.byte(f, -2) == 255 then
        local r = string.sub(f, 1, -3)
        halves[r] = halves[r] or {}
        halves[r][string.sub(f, -1)] = prev[i + 1]
      else
        counts[f] = tonumber(prev[i + 1])
      end
    end
    -- n hits spread over a..b at e (window's evenTerm).
    local function term(n, a, b)
      local den = b - a + 1
      local num = 0
      if strict then
        if b > e then num = den end
      elseif e < a then num = den
      elseif e < b then num = b - e end
      if num == 0 or n == 0 then return 0 end
      return muldiv(n, num, den)
    end
    local function parse(s)
      if not s then return 0, 0, 0, 0, 0 end
      local n, f, l, r, b = string.match(s, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
      if not n then return 0, -1, -1, 0, 0 end
      return tonumber(n), tonumber(f), tonumber(l), tonumber(r), tonumber(b)
    end
    local lo, hi, k = 0, H, '0'
    if e >= H then lo, hi, k = H, W, '1' end
    local late = 0
    for r, n in pairs(counts) do
      local h = halves[r] or {}
      local n0, f0, l0, r0, b0 = parse(h['0'])
      local n1, f1, l1, r1, b1 = parse(h['1'])
      local ex = n - n0 - n1
      local bad1 = false
      if ex > 0 then n1 = n1 + ex; bad1 = true end
      late = late + n1
      local on, of, ol, orr, ob, bad = n0, f0, l0, r0, b0, false
      if k == '1' then on, of, ol, orr, ob, bad = n1, f1, l1, r1, b1, bad1 end
      if on > 0 then
        -- window.Half.Valid
        if bad or of < lo or ol >= hi or of > ol then bad = true
        elseif not ((orr == 0 and ob == 0) or (of < orr and orr <= ol and ob > 0 and ob < on)) then bad = true end
        if bad then
          wp = wp + term(on, lo, hi - 1)
        elseif ob == 0 then
          wp = wp + term(on, of, ol)
        else
          wp = wp + term(ob, of, orr - 1) + term(on - ob, orr, ol)
        end
      end
    end
    if e < H then wp = wp + late end
  end
  if wp <= cap - c then allowed = 1 end
  est = c + wp
end
if allowed == 1 and ARGV[6] ~= '1' then
  if mode >= '2' then
    -- window.Half.Add with a run gap of max(W/40, 1) ms.
    local gap = math.max((W - math.fmod(W, 40)) / 40, 1)
    local n, f, l, r, b = 0, e, e, 0, 0
    if myhalf then
      local a1, a2, a3, a4, a5 = string.match(myhalf, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
      if a1 then n, f, l, r, b = tonumber(a1), tonumber(a2), tonumber(a3), tonumber(a4), tonumber(a5) end
    end
    if n == 0 then f, l, r, b = e, e, 0, 0
    elseif e - l > gap then r, b, l = e, n, e
    else
      if e < f then f = e end
      if e > l then l = e end
    end
    n = n + hits
    redis.call('HSET', KEYS[1], me, string.format('%.0f', mine + hits),
      me .. '\255' .. hk, string.format('%.0f:%.0f:%.0f:%.0f:%.0f', n, f, l, r, b))
  else
    redis.call('HINCRBY', KEYS[1], me, ARGV[4])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
end
return {allowed, cur, prev, string.format('%.0f', est)}
`)

// gcraScript decides a token bucket request as GCRA.
//
//	KEYS[1] the TAT string (Unix µs)
//	ARGV    now_us, increment_us (window.Limit.GCRAIncrement),
//	        capacity_us (window.Limit.GCRACapacity), peek
//
// allow iff max(TAT, now) + inc - now <= capacity, then TAT = that sum,
// exactly as window.Limit.DecideGCRA.
//
// It returns {allowed (0/1), TAT before the request ("" when none)}.
var gcraScript = redis.NewScript(`
local old = redis.call('GET', KEYS[1])
local now = tonumber(ARGV[1])
local inc = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local t = now
if old then
  local v = tonumber(old)
  if v > now then t = v end
else
  old = ''
end
local new = t + inc
local allowed = 0
if new - now <= w then
  allowed = 1
  if ARGV[4] ~= '1' then
    local ttl = math.ceil((new - now) / 1000) + 1000
    redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', string.format('%.0f', ttl))
  end
end
return {allowed, old}
`)

// logScript decides a sliding log request.
//
//	KEYS[1] the log, a sorted set of "<hits>:<nonce>" scored by Unix ms
//	ARGV    now_ms, window_ms, limit, hits, peek, member, ttl_ms
//
// Entries after now - window count (window.Limit.DecideLog's live entries);
// older ones are removed. It returns {allowed (0/1),
// ZRANGE WITHSCORES of the counted entries before the request}.
var logScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - w))
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local sum = 0
for i = 1, #entries, 2 do
  local h = string.match(entries[i], '^(%d+):')
  sum = sum + tonumber(h)
end
local allowed = 0
if sum <= limit - hits then
  allowed = 1
  if ARGV[5] ~= '1' then
    redis.call('ZADD', KEYS[1], now, ARGV[6])
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
  end
end
return {allowed, entries}
`)

// mergeScript max-merges one region's total into a bucket hash.
//
//	KEYS[1] the bucket hash
//	ARGV    region, count (decimal, no leading zeros), ttl_ms,
//	        max regions (MaxRegionsPerBucket), early half, late half
//	        ("N:First:Last:Run:Before", or "" for none)
//
// Each half merges as window.Half.Merge: First by minimum, the others by
// maximum. It returns 1 when the stored state grew, 0 when not, and -1 when
// the region is new to a bucket that already holds max regions (dropped;
// counting them reads the hash's fields, once per new region).
var mergeScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then
  local n = 0
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.byte(f, -2) ~= 255 then n = n + 1 end
  end
  if n >= tonumber(ARGV[4]) then return -1 end
end
local n = ARGV[2]
local grew = 0
if (not old) or #old < #n or (#old == #n and old < n) then
  redis.call('HSET', KEYS[1], ARGV[1], n)
  grew = 1
end
local P = '^(%d+):(%d+):(%d+):(%d+):(%d+)$'
for k = 0, 1 do
  local new = ARGV[5 + k]
  if new ~= '' then
    local f = ARGV[1] .. '\255' .. k
    local cur = redis.call('HGET', KEYS[1], f)
    local out = new
    if cur then
      local a = {string.match(cur, P)}
      local b = {string.match(new, P)}
      if #a == 5 and tonumber(a[1]) > 0 then
        for i = 1, 5 do a[i] = tonumber(a[i]); b[i] = tonumber(b[i]) end
        if b[1] == 0 then
          out = cur
        else
          out = string.format('%.0f:%.0f:%.0f:%.0f:%.0f', math.max(a[1], b[1]), math.min(a[2], b[2]),
            math.max(a[3], b[3]), math.max(a[4], b[4]), math.max(a[5], b[5]))
        end
      end
    end
    if out ~= cur then
      redis.call('HSET', KEYS[1], f, out)
      grew = 1
    end
  end
end
if redis.call('PTTL', KEYS[1]) < 0 or grew == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return grew
`)

var allScripts = []*redis.Script{counterScript, gcraScript, logScript, mergeScript}
