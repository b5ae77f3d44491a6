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

// counterScript decides a sliding or fixed window request.
//
//	KEYS[1] current bucket hash, KEYS[2] previous bucket hash
//	ARGV    now_ms, window_ms, limit, hits, region, peek (0/1),
//	        fixed (0/1), ttl_ms, strict (0/1)
//
// Strict counts the previous bucket whole (window.Sliding with K = 1 and
// Strict): the weight's numerator f is W.
//
// It returns {allowed (0/1), HGETALL current, HGETALL previous}, the counts
// read before the increment.
var counterScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local fixed = ARGV[7] == '1'
local TWO53 = 9007199254740992
local cur = redis.call('HGETALL', KEYS[1])
local prev = redis.call('HGETALL', KEYS[2])
local c = 0
for i = 2, #cur, 2 do c = c + tonumber(cur[i]) end
local cap = limit - hits
local allowed = 0
if c <= cap then
  local wp = 0
  if not fixed and #prev > 0 then
    -- f = W - e, the weight's numerator; wp = floor(P * f / W) where P is
    -- the previous bucket's sum. P = A*W + B with B < W, so
    -- wp = A*f + floor(B*f/W); B*f is split into 2^15 limbs of f so every
    -- product stays below 2^46.
    local f = W - math.fmod(now, W)
    if ARGV[9] == '1' then f = W end
    local A, B = 0, 0
    for i = 2, #prev, 2 do
      local p = tonumber(prev[i])
      local b = math.fmod(p, W)
      A = A + (p - b) / W
      B = B + b
    end
    local b2 = math.fmod(B, W)
    A = A + (B - b2) / W
    local fl = math.fmod(f, 32768)
    local fh = (f - fl) / 32768
    local x = b2 * fh
    local r1 = math.fmod(x, W)
    local q1 = (x - r1) / W
    local y = r1 * 32768 + b2 * fl
    local r2 = math.fmod(y, W)
    local q2 = (y - r2) / W
    local af = A * f
    if af >= TWO53 then
      wp = TWO53
    else
      wp = af + q1 * 32768 + q2
    end
  end
  if wp <= cap - c then allowed = 1 end
end
if allowed == 1 and ARGV[6] ~= '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[5], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
end
return {allowed, cur, prev}
`)

// slidingScript decides a sliding window request on a counter over K > 1
// sub-buckets (window.Sliding), all held in one hash whose fields are
// "<j>:<region>", read by one HGETALL.
//
//	KEYS[1] the counter hash
//	ARGV    j (the current sub-bucket), e (ms elapsed in it), S (ms),
//	        K, limit, hits, region, peek (0/1), strict (0/1), ttl_ms
//
// whole = the sum of sub-buckets j-K+1..j, oldest = the sum of j-K, and
// allow iff whole + floor(oldest * f / S) + hits <= limit with f = S - e
// (strict: f = S), computed exactly as counterScript computes the
// two-bucket weight. Fields of sub-buckets older than j-K are deleted;
// newer than j (a region whose clock is ahead) are kept and not counted.
//
// It returns {allowed (0/1), HGETALL before the request}.
var slidingScript = redis.NewScript(`
local j = tonumber(ARGV[1])
local e = tonumber(ARGV[2])
local S = tonumber(ARGV[3])
local K = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local hits = tonumber(ARGV[6])
local TWO53 = 9007199254740992
local all = redis.call('HGETALL', KEYS[1])
local c = 0
local olds = {}
local stale = {}
for i = 1, #all, 2 do
  local f = all[i]
  local p = string.find(f, ':', 1, true)
  local jj = p and tonumber(string.sub(f, 1, p - 1))
  if not jj or jj < j - K then
    stale[#stale + 1] = f
  elseif jj == j - K then
    olds[#olds + 1] = tonumber(all[i + 1])
  elseif jj <= j then
    c = c + tonumber(all[i + 1])
  end
end
for i = 1, #stale, 1000 do
  redis.call('HDEL', KEYS[1], unpack(stale, i, math.min(i + 999, #stale)))
end
local cap = limit - hits
local allowed = 0
if c <= cap then
  local wp = 0
  if #olds > 0 then
    -- As counterScript: P = A*S + B, wp = A*f + floor(B*f/S), B*f in
    -- 2^15 limbs of f so every product stays below 2^46.
    local f = S - e
    if ARGV[9] == '1' then f = S end
    local A, B = 0, 0
    for i = 1, #olds do
      local p = olds[i]
      local b = math.fmod(p, S)
      A = A + (p - b) / S
      B = B + b
    end
    local b2 = math.fmod(B, S)
    A = A + (B - b2) / S
    local fl = math.fmod(f, 32768)
    local fh = (f - fl) / 32768
    local x = b2 * fh
    local r1 = math.fmod(x, S)
    local q1 = (x - r1) / S
    local y = r1 * 32768 + b2 * fl
    local r2 = math.fmod(y, S)
    local q2 = (y - r2) / S
    local af = A * f
    if af >= TWO53 then
      wp = TWO53
    else
      wp = af + q1 * 32768 + q2
    end
  end
  if wp <= cap - c then allowed = 1 end
end
if allowed == 1 and ARGV[8] ~= '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':' .. ARGV[7], ARGV[6])
  redis.call('PEXPIRE', KEYS[1], ARGV[10])
end
return {allowed, all}
`)

// slidingMergeScript max-merges one region's total of one sub-bucket into
// a counter hash over K > 1 sub-buckets (see slidingScript).
//
//	KEYS[1] the counter hash
//	ARGV    field ("<j>:<region>"), count (decimal, no leading zeros),
//	        ttl_ms, max regions per sub-bucket (MaxRegionsPerBucket),
//	        the field's prefix "<j>:", max fields
//
// It returns 1 when the stored count grew, 0 when not, and -1 when the
// region is new to a sub-bucket that already holds max regions, or the
// hash already holds max fields (dropped).
var slidingMergeScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then
  local ks = redis.call('HKEYS', KEYS[1])
  if #ks >= tonumber(ARGV[6]) then return -1 end
  local pre = ARGV[5]
  local n = 0
  for i = 1, #ks do
    if string.sub(ks[i], 1, #pre) == pre then n = n + 1 end
  end
  if n >= tonumber(ARGV[4]) then return -1 end
end
local n = ARGV[2]
local grew = 0
if (not old) or #old < #n or (#old == #n and old < n) then
  redis.call('HSET', KEYS[1], ARGV[1], n)
  grew = 1
end
if redis.call('PTTL', KEYS[1]) < 0 or grew == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return grew
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
//	        max regions (MaxRegionsPerBucket)
//
// It returns 1 when the stored count grew, 0 when not, and -1 when the
// region is new to a bucket that already holds max regions (dropped).
var mergeScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
if (not old) and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return -1
end
local n = ARGV[2]
local grew = 0
if (not old) or #old < #n or (#old == #n and old < n) then
  redis.call('HSET', KEYS[1], ARGV[1], n)
  grew = 1
end
if redis.call('PTTL', KEYS[1]) < 0 or grew == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return grew
`)

var allScripts = []*redis.Script{counterScript, slidingScript, gcraScript, logScript, mergeScript, slidingMergeScript}
