package region

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rlcluster/rlcluster/internal/window"
)

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
// holding its count (decimal), and for the default sliding window one more
// field, the region's name followed by the bytes 0xFF 'm' (0xFF is never in
// a region name, which is UTF-8), holding its trail (window.Trail): per
// mark 12 bytes, Lua's struct.pack('<I4d', At, cum), the offset of the
// mark's last hit and the hits of the trail up to and including the mark.
// Cumulative counts let a decision find the hits after an offset with one
// binary search instead of a sum over the marks.
const trailSuffix = "\xffm"

// markBytes is the size of one packed mark.
const markBytes = 12

// counterScript decides a sliding or fixed window request.
//
//	KEYS[1] current bucket hash, KEYS[2] previous bucket hash (of the
//	        bucket b of now_ms); with server_clock, KEYS[3] bucket b+1's,
//	        KEYS[4] bucket b-2's
//	ARGV[1] the numbers, packed as struct.pack('<dddddBBB'): now_ms,
//	        window_ms, limit, hits, ttl_ms (each integer as the nearest
//	        double, as tonumber of its decimal would read it), peek
//	        (0/1), mode (0 two-bucket, 1 fixed, 2 trails, 3 trails
//	        strict), server_clock (0/1)
//	ARGV[2] region
//
// The numbers come packed in one argument rather than one argument each:
// Redis makes an object and a Lua string of every argument, and tonumber
// of a decimal is a strtod (docs/performance.md has what that cost).
//
// With server_clock the instant is Redis's TIME, the clock every node of
// the region shares, when it falls in bucket b-1, b or b+1 of now_ms (a
// node clock off by less than a window); otherwise now_ms stands. The
// prologue below picks the instant and the bucket pair; the rest of the
// script reads only now, kcur and kprev. TIME is read through serverTime
// (see timeAlone): the decisions of one batch script call, which runs
// atomically, share one reading of it.
//
// In the trail modes (2; 3 is strict, decided the same) it decides exactly
// as window.Limit.DecideTrails on the regions' trails, each fitted to its
// count as window.Trail.Fit does, and an admitted request adds its hits to
// the local region's trail as window.Trail.Add does (a granule of 1 ms up
// to window.ExactMax, else W/window.Granules). It returns {allowed (0/1), the
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

// trailConstants puts window's bounds of a trail into the scripts' sources.
var trailConstants = strings.NewReplacer("EXACTMAX", strconv.Itoa(window.ExactMax), "MERGEGRANULES", strconv.Itoa(window.MergeGranules), "GRANULES", strconv.Itoa(window.Granules))

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
var counterSource = trailConstants.Replace(`
local now, W, limit, hits, ttl, peek, mode, server = struct.unpack('<dddddBBB', ARGV[1])
local kcur, kprev = KEYS[1], KEYS[2]
if server == 1 then
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
local me = ARGV[2]
local TWO53 = 9007199254740992
local cur = redis.call('HGETALL', kcur)
local prev = redis.call('HGETALL', kprev)
local e = math.fmod(now, W)
-- The hits of a packed trail (see trailSuffix) up to and including mark i
-- (from 0).
local function trailCum(s, i)
  local _, c = struct.unpack('<I4d', s, i * 12 + 1)
  return c
end
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
local mine, mytrail = 0, nil
local myf = me .. '\255m'
for i = 1, #cur, 2 do
  local f = cur[i]
  if f == myf then
    mytrail = cur[i + 1]
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
  if mode == 0 and #prev > 0 then
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
  elseif mode >= 2 and #prev > 0 then
    -- Per region, its count and its trail: the hits of the marks after e
    -- (window.Trail.After), fitted to the count.
    local pv = {}
    for i = 1, #prev, 2 do pv[prev[i]] = prev[i + 1] end
    for i = 1, #prev, 2 do
      local r = prev[i]
      if string.byte(r, -2) ~= 255 then
        local n = tonumber(prev[i + 1])
        local s = pv[r .. '\255m'] or ''
        local k = (#s - math.fmod(#s, 12)) / 12
        local total, after = 0, 0
        if k > 0 then
          total = trailCum(s, k - 1)
          local lo, hi = 0, k
          while lo < hi do
            local mid = (lo + hi - math.fmod(lo + hi, 2)) / 2
            if struct.unpack('<I4', s, mid * 12 + 1) > e then hi = mid else lo = mid + 1 end
          end
          if lo < k then
            after = total
            if lo > 0 then after = after - trailCum(s, lo - 1) end
          end
        end
        -- window.Trail.Fit: the count is the authority on how many hits
        -- there are: an excess counts until the bucket's last ms, a
        -- shortfall drops the trail's earliest hits.
        if n > total then
          if e < W - 1 then after = after + n - total end
        elseif after > n then
          after = n
        end
        wp = wp + after
      end
    end
  end
  if wp <= cap - c then allowed = 1 end
  est = c + wp
end
if allowed == 1 and peek ~= 1 then
  if mode >= 2 then
    -- window.Trail.Add: a granule of 1 ms up to the exact limit, else
    -- W/GRANULES.
    local s = mytrail or ''
    local k = (#s - math.fmod(#s, 12)) / 12
    local at, cum = e, hits
    if k > 0 then
      local la, lc = struct.unpack('<I4d', s, (k - 1) * 12 + 1)
      if at < la then at = la end
      cum = lc + hits
      if at == la or (limit > EXACTMAX and math.floor(at * GRANULES / W) == math.floor(la * GRANULES / W)) then
        k = k - 1
      end
      s = string.sub(s, 1, k * 12)
    end
    redis.call('HSET', kcur, me, string.format('%.0f', mine + hits),
      myf, s .. struct.pack('<I4d', at, cum))
  else
    redis.call('HINCRBY', kcur, me, string.format('%.0f', hits))
  end
  -- A bucket needs to live two windows from its start (current, then
  -- previous), and this write is at or after its start: the expiry set when
  -- the write creates it (ttl_ms, two windows and the margin) holds it long
  -- enough; every other writer (mergeScript) sets one when it creates one.
  if #cur == 0 then redis.call('PEXPIRE', kcur, string.format('%.0f', ttl)) end
end
if est > TWO53 then est = TWO53 end
return {allowed, est, now, prev, unpack(cur)}
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
//	        max regions (MaxRegionsPerBucket), trail (packed as in the
//	        bucket hash, coarse, or "" for none), window_ms, the store's
//	        own region (never replaced)
//
// The trail merges as window.Trail.Merge: span by span
// (window.MergeSpan), the side with more hits (or as many, the last later,
// or as many and as late in more marks) wins. A region new to the
// bucket takes no field for a zero count. In a bucket that already holds
// max regions, a new region takes the place of the one with the smallest
// count (not the store's own), its trail included, when its count is
// larger (as memBucket.maxMerge: a full bucket keeps the largest counts),
// and is dropped otherwise. It returns 1 when the stored state grew, 0
// when not, -1 when the total was dropped and -2 when it replaced another
// region (counting the regions reads the hash's fields, once per new
// region).
var mergeScript = redis.NewScript(trailConstants.Replace(`
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
    redis.call('HDEL', KEYS[1], minf, minf .. '\255m')
    replaced = true
  end
end
local n = ARGV[2]
local grew = 0
if (not old) or #old < #n or (#old == #n and old < n) then
  redis.call('HSET', KEYS[1], ARGV[1], n)
  grew = 1
end
local new = ARGV[5]
if #new >= 12 then
  local W = tonumber(ARGV[6])
  local f = ARGV[1] .. '\255m'
  local cur = redis.call('HGET', KEYS[1], f) or ''
  -- Unpack a trail into offsets and per-mark hits.
  local function marks(s)
    local at, hs, prev = {}, {}, 0
    for i = 0, (#s - math.fmod(#s, 12)) / 12 - 1 do
      local a, c = struct.unpack('<I4d', s, i * 12 + 1)
      at[#at + 1], hs[#hs + 1], prev = a, c - prev, c
    end
    return at, hs
  end
  local aa, an = marks(cur)
  local ba, bn = marks(new)
  local function g(a) return math.floor(a * MERGEGRANULES / W) end
  local out, cum, i, j, changed = {}, 0, 1, 1, false
  while i <= #aa or j <= #ba do
    local gg
    if i > #aa then gg = g(ba[j])
    elseif j > #ba then gg = g(aa[i])
    else gg = math.min(g(aa[i]), g(ba[j])) end
    local i2, na, la = i, 0, -1
    while i2 <= #aa and g(aa[i2]) == gg do na, la, i2 = na + an[i2], aa[i2], i2 + 1 end
    local j2, nb, lb = j, 0, -1
    while j2 <= #ba and g(ba[j2]) == gg do nb, lb, j2 = nb + bn[j2], ba[j2], j2 + 1 end
    if nb > na or (nb == na and (lb > la or (lb == la and j2 - j > i2 - i))) then
      changed = true
      for x = j, j2 - 1 do cum = cum + bn[x]; out[#out + 1] = struct.pack('<I4d', ba[x], cum) end
    else
      for x = i, i2 - 1 do cum = cum + an[x]; out[#out + 1] = struct.pack('<I4d', aa[x], cum) end
    end
    i, j = i2, j2
  end
  if changed then
    redis.call('HSET', KEYS[1], f, table.concat(out))
    grew = 1
  end
end
if redis.call('PTTL', KEYS[1]) < 0 or grew == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
if replaced then return -2 end
return grew
`))

var allScripts = []*redis.Script{counterScript, gcraScript, logScript, mergeScript}
