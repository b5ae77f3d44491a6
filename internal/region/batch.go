package region

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The batch script runs many decisions in one EVALSHA. It is built at init
// from the per-decision scripts' own source (lua.go's constants), each wrapped unchanged in a
// Lua function whose parameters KEYS and ARGV shadow the globals, after
// timeAlone's serverTime, wrapped to read Redis's TIME once for the whole
// call (the decisions of one call run atomically, at one instant):
//
//	KEYS    every decision's keys, one after the other
//	ARGV    a header of three bytes per decision: its script (1 counter,
//	        2 gcra, 3 log), its key count, its argument count; then
//	        every decision's arguments, one after the other
//
// It returns {outcomes, reply 1, ..., reply n}: outcomes holds one
// character per decision, '1' when its reply is its own script's reply,
// '0' when it raised an error, its reply then the error message (each
// decision runs under pcall, so one decision's error fails no other). The batch is
// atomic as a whole, as each decision is on its own.
//
// On a Redis Cluster every key of a script must hash to one slot, so only
// decisions whose keys share a slot are batched together (see Redis.groups).
var batchScript = newBatchScript(batchSources...)

// singleScripts are the scripts a lone decision runs, in the order of
// batchSources.
var singleScripts = []*redis.Script{counterScript, gcraScript, logScript}

// batchSources lists the sources of the scripts the batch script can run,
// in the order of their numbers in ARGV (from 1).
var batchSources = []string{counterSource, gcraSource, logSource}

// newBatchScript builds the batch script over the scripts of sources.
func newBatchScript(sources ...string) *redis.Script {
	var b strings.Builder
	// One TIME per call, which is atomic, for all its decisions, rather
	// than one per decision (docs/performance.md, "Redis's share per
	// decision").
	b.WriteString(timeAlone)
	b.WriteString(`local readTime, clock = serverTime, nil
serverTime = function()
  if not clock then clock = readTime() end
  return clock
end
local decide = {}
`)
	for i, src := range sources {
		fmt.Fprintf(&b, "decide[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, src)
	}
	b.WriteString(`local hdr = ARGV[1]
local n = #hdr / 3
local out, oks = {}, {}
local k, a = {}, {}
local ki, ai, mk, ma = 1, 2, 0, 0
for i = 1, n do
  local s, nk, na = string.byte(hdr, 3 * i - 2, 3 * i)
  local f = decide[s]
  for j = 1, nk do k[j] = KEYS[ki]; ki = ki + 1 end
  for j = nk + 1, mk do k[j] = nil end
  for j = 1, na do a[j] = ARGV[ai]; ai = ai + 1 end
  for j = na + 1, ma do a[j] = nil end
  mk, ma = nk, na
  local ok, r = pcall(f, k, a)
  if ok then
    if r == nil then r = false end
    oks[i] = '1'
  else
    if type(r) == 'table' and r.err then r = r.err end
    r = tostring(r)
    oks[i] = '0'
  end
  out[i + 1] = r
end
out[1] = table.concat(oks)
return out
`)
	return redis.NewScript(b.String())
}

// scriptError is an error one decision of a batch raised inside Redis: a
// reply of Redis, as the same error of a single EVALSHA would be.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as a reply of Redis (see redis.Error).
func (scriptError) RedisError() {}

var _ redis.Error = scriptError("")

// batchReplies splits the batch script's reply v (raw RESP) into the
// replies of its n decisions.
func batchReplies(v []byte, n int) ([]reply, error) {
	p := respReader{b: v}
	if p.array() != n+1 {
		return nil, scriptError(fmt.Sprintf("region: redis batch: unexpected reply %.100q for %d decisions", v, n))
	}
	oks, _ := p.str()
	if len(oks) != n {
		return nil, scriptError(fmt.Sprintf("region: redis batch: unexpected outcomes %q for %d decisions", oks, n))
	}
	out := make([]reply, n)
	for i := range out {
		e := p.raw()
		if oks[i] == '1' {
			out[i] = reply{v: e}
			continue
		}
		m := respReader{b: e}
		msg, _ := m.str()
		out[i] = reply{err: scriptError(msg)}
	}
	if p.err != nil {
		return nil, scriptError(fmt.Sprintf("region: redis batch: %v", p.err))
	}
	return out, nil
}

// reply is one decision's script reply (raw RESP), or its error.
type reply struct {
	v   []byte
	err error
}

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XModem) of
// its hash tag (the part between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
