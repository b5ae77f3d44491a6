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
//	KEYS[1] current bucket hash, KEYS[2] previous bucket hash (of the
//	        bucket b of now_ms); with server_clock, KEYS[3] bucket b+1's,
//	        KEYS[4] bucket b-2's
//	ARGV    now_ms, window_ms, limit, hits, region, peek (0/1),
//	        fixed (0/1), ttl_ms, server_clock (0/1)
//
// With server_clock the instant is Redis's TIME, the clock every node of
// the region shares, when it falls in bucket b-1, b or b+1 of now_ms (a
// node clock off by less than a window); otherwise now_ms stands. The
// prologue below picks the instant and the bucket pair; the rest of the
// script reads only now, kcur and kprev.
//
// It returns {allowed (0/1), HGETALL current, HGETALL previous, now_ms
// used}, the counts read before the increment.
var counterScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local kcur, kprev = KEYS[1], KEYS[2]
if ARGV[9] == '1' then
  local t = redis.call('TIME')
  local rnow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local d = (rnow - math.fmod(rnow, W)) / W - (now - math.fmod(now, W)) / W
  if d == 0 then
    now = rnow
  elseif d == 1 then
    now, kcur, kprev = rnow, KEYS[3], KEYS[1]
  elseif d == -1 then
    now, kcur, kprev = rnow, KEYS[2], KEYS[4]
  end
end
local limit = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])
local fixed = ARGV[7] == '1'
local TWO53 = 9007199254740992
local cur = redis.call('HGETALL', kcur)
local prev = redis.call('HGETALL', kprev)
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
  redis.call('HINCRBY', kcur, ARGV[5], ARGV[4])
  redis.call('PEXPIRE', kcur, ARGV[8])
end
return {allowed, cur, prev, now}
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

var allScripts = []*redis.Script{counterScript, gcraScript, logScript, mergeScript}
