package region

import "github.com/redis/go-redis/v9"

// The Lua scripts the Redis store runs. A lone decision is one EVALSHA;
// decisions that share a round trip run in one EVALSHA of the batch
// script (batch.go), which wraps these sources.
//
// Redis Lua numbers are doubles, exact for integers up to 2^53. Limits are at
// most 2^53 and a region's count never exceeds the limit by more than one
// request, so every count fits; the sliding estimate floor(prev*f/W) is
// computed exactly by splitting prev and f (see counterScript), and sums that
// could pass 2^53 only ever make a request denied, which the comparisons
// below keep exact.

// A counter bucket is one hash: per region a field named after the region
// holding its count (decimal), and for the default sliding window two more
// fields, the region's name followed by the byte 0xFF (never in a region
// name, which is UTF-8) and '0' or '1', holding its early and late half
// (window.Half) as five little-endian doubles, N, First, Last, Run, Before
// (40 bytes, Lua's struct.pack('<ddddd'): every value is an integer below
// 2^53, exact as a double, and unpacking costs the script far less than
// parsing text).
const halfSep = "\xff"

// counterScript decides a sliding or fixed window request.
//
//	KEYS[1] current bucket hash, KEYS[2] previous bucket hash (of the
//	        bucket b of now_ms); with server_clock, KEYS[3] bucket b+1's,
//	        KEYS[4] bucket b-2's
//	ARGV    now_ms, window_ms, limit, hits, region, peek (0/1),
//	        mode (0 two-bucket, 1 fixed, 2 spans, 3 spans strict), ttl_ms,
//	        server_clock (0/1)
//
// With server_clock the instant is Redis's TIME, the clock every node of
// the region shares, when it falls in bucket b-1, b or b+1 of now_ms (a
// node clock off by less than a window); otherwise now_ms stands. The
// prologue below picks the instant and the bucket pair; the rest of the
// script reads only now, kcur and kprev. TIME is read through serverTime
// (see timeAlone): the decisions of one batch script call, which runs
// atomically, share one reading of it.
//
// In the span modes it decides exactly as window.Limit.DecideSpans on the
// regions' halves (a region's count above its halves' is added to its late
// half as spread over all of it), and an admitted request updates the local
// region's half as window.Half.Add does. It returns {allowed (0/1), the
// estimate, now_ms used, HGETALL previous, then the elements of HGETALL
// current}, the hashes read before the update; the estimate is -1 when the
// current bucket alone denies, and 2^53 when it is at least that.
//
// The reply is shaped for Redis's cost of converting it: each table in a
// reply costs Redis a few thousand instructions beyond its elements (Redis
// 7.0 probes every table for the err, ok, double, map, set and big_number
// fields), a number formatted as text more than the number, and copying
// elements in Lua about 400 each. Returning the current hash's elements
// inline (unpack, one C call) and the estimate as an integer took the
// decision from 137k to 132k Redis instructions, in calls of 8 decisions,
// one region (callgrind); flattening the previous hash or the batch
// script's replies by copying cost more than it saved. (unpack returns at
// most about 8,000 values, Lua's C stack; a bucket hash holds at most
// three fields per region, MaxRegionsPerBucket and the local region, so
// at most 1,542.)
var counterScript = redis.NewScript(timeAlone + counterSource)

// timeAlone defines serverTime, Redis's TIME in Unix ms, for counterSource
// run on its own; the batch script (batch.go) wraps it to read TIME once
// per call.
const timeAlone = `local function serverTime()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// counterSource is counterScript's Lua source (the batch script wraps it
// too), after a definition of serverTime.
const counterSource = `
local now = tonumber(ARGV[1])
local W = tonumber(ARGV[2])
local kcur, kprev = KEYS[1], KEYS[2]
if ARGV[9] == '1' then
  local rnow = serverTime()
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
local me = ARGV[5]
local mode = ARGV[7]
local TWO53 = 9007199254740992
local cur = redis.call('HGETALL', kcur)
local prev = redis.call('HGETALL', kprev)
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
local myf = me .. '\255' .. hk
for i = 1, #cur, 2 do
  local f = cur[i]
  if f == myf then
    myhalf = cur[i + 1]
  elseif string.byte(f, -2) ~= 255 then
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
    -- The previous bucket's fields by name. Per region (a field without
    -- the separator), its count, its oldest half (the one holding e's
    -- offset: '0' while e < H, else '1') and the other half's count.
    local pv = {}
    for i = 1, #prev, 2 do pv[prev[i]] = prev[i + 1] end
    local so, sx = '\255' .. hk, '\2551'
    if hk == '1' then sx = '\2550' end
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
    local lo, hi = 0, H
    if e >= H then lo, hi = H, W end
    local late = 0
    for i = 1, #prev, 2 do
      local r = prev[i]
      if string.byte(r, -2) ~= 255 then
        local n = tonumber(prev[i + 1])
        local on, of, ol, orr, ob = 0, 0, 0, 0, 0
        local s = pv[r .. so]
        if s then
          if #s == 40 then on, of, ol, orr, ob = struct.unpack('<ddddd', s) else of, ol = -1, -1 end
        end
        local other = 0
        s = pv[r .. sx]
        if s and #s == 40 then other = struct.unpack('<d', s) end
        local bad = false
        -- Hits counted without halves (the count's excess over both) join
        -- the late half as spread over all of it.
        if hk == '0' then
          if n - on > other then other = n - on end
          late = late + other
        elseif n - other > on then
          on, bad = n - other, true
        end
        if on > 0 then
          -- window.Half.Valid
          if bad or of < lo or ol >= hi or of > ol then bad = true
          elseif not ((orr == 0 and ob == 0) or (of < orr and orr <= ol and ob > 0 and ob < on)) then bad = true end
          if bad then
            wp = wp + term(on, lo, hi - 1)
          elseif ob == 0 then
            wp = wp + term(on, of, ol)
          else
            wp = wp + term(ob, orr - 1, orr - 1) + term(on - ob, orr, ol)
          end
        end
      end
    end
    wp = wp + late
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
      if #myhalf == 40 then n, f, l, r, b = struct.unpack('<ddddd', myhalf) end
    end
    if n == 0 then f, l, r, b = e, e, 0, 0
    elseif e - l > gap then r, b, l = e, n, e
    else
      if e < f then f = e end
      if e > l then l = e end
    end
    n = n + hits
    redis.call('HSET', kcur, me, string.format('%.0f', mine + hits),
      myf, struct.pack('<ddddd', n, f, l, r, b))
  else
    redis.call('HINCRBY', kcur, me, ARGV[4])
  end
  -- A bucket needs to live two windows from its start (current, then
  -- previous), and this write is at or after its start: the expiry set when
  -- the write creates it (ttl_ms, two windows and the margin) holds it long
  -- enough; every other writer (mergeScript) sets one when it creates one.
  if #cur == 0 then redis.call('PEXPIRE', kcur, ARGV[8]) end
end
if est > TWO53 then est = TWO53 end
return {allowed, est, now, prev, unpack(cur)}
`

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
var gcraScript = redis.NewScript(gcraSource)

// gcraSource is gcraScript's Lua source (the batch script wraps it too).
const gcraSource = `
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
`

// logScript decides a sliding log request.
//
//	KEYS[1] the log, a sorted set of "<hits>:<nonce>" scored by Unix ms
//	ARGV    now_ms, window_ms, limit, hits, peek, member, ttl_ms
//
// Entries after now - window count (window.Limit.DecideLog's live entries);
// older ones are removed. It returns {allowed (0/1),
// ZRANGE WITHSCORES of the counted entries before the request}.
var logScript = redis.NewScript(logSource)

// logSource is logScript's Lua source (the batch script wraps it too).
const logSource = `
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
`

// mergeScript max-merges one region's total into a bucket hash.
//
//	KEYS[1] the bucket hash
//	ARGV    region, count (decimal, no leading zeros), ttl_ms,
//	        max regions (MaxRegionsPerBucket), early half, late half
//	        (packed as in the bucket hash, or "" for none), the store's
//	        own region (never replaced)
//
// Each half merges as window.Half.Merge: First by minimum, the others by
// maximum. A region new to the bucket takes no field for a zero count. In
// a bucket that already holds max regions, a new region takes the place
// of the one with the smallest count (not the store's own) when its count
// is larger (as memBucket.maxMerge: a full bucket keeps the largest
// counts), and is dropped otherwise. It returns 1 when the stored state
// grew, 0 when not, -1 when the total was dropped and -2 when it replaced
// another region (counting the regions reads the hash's fields, once per
// new region).
var mergeScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
local replaced = false
if not old then
  if ARGV[2] == '0' then return 0 end
  local regions = {}
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.byte(f, -2) ~= 255 then regions[#regions + 1] = f end
  end
  if #regions >= tonumber(ARGV[4]) then
    local counts = redis.call('HMGET', KEYS[1], unpack(regions))
    local minf, minv = nil, nil
    for i, f in ipairs(regions) do
      local v = tonumber(counts[i])
      if f ~= ARGV[7] and v and (minv == nil or v < minv) then minf, minv = f, v end
    end
    if minf == nil or minv >= tonumber(ARGV[2]) then return -1 end
    redis.call('HDEL', KEYS[1], minf, minf .. '\255' .. 0, minf .. '\255' .. 1)
    replaced = true
  end
end
local n = ARGV[2]
local grew = 0
if (not old) or #old < #n or (#old == #n and old < n) then
  redis.call('HSET', KEYS[1], ARGV[1], n)
  grew = 1
end
for k = 0, 1 do
  local new = ARGV[5 + k]
  if #new == 40 then
    local f = ARGV[1] .. '\255' .. k
    local cur = redis.call('HGET', KEYS[1], f)
    local out = new
    if cur and #cur == 40 then
      local a1, a2, a3, a4, a5 = struct.unpack('<ddddd', cur)
      local b1, b2, b3, b4, b5 = struct.unpack('<ddddd', new)
      if a1 > 0 and b1 == 0 then
        out = cur
      elseif a1 > 0 then
        out = struct.pack('<ddddd', math.max(a1, b1), math.min(a2, b2), math.max(a3, b3), math.max(a4, b4), math.max(a5, b5))
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
if replaced then return -2 end
return grew
`)

var allScripts = []*redis.Script{counterScript, gcraScript, logScript, mergeScript}
