package api

import (
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/rlcluster/rlcluster/gen/ratelimit/v1"
)

// The response messages on the hot path (CheckResponse, CheckBatchResponse,
// PeekResponse) are encoded by hand, and their requests decoded by hand
// (jsonfastdec.go), at a fraction of protojson's time and allocations
// (BenchmarkJSONServing, BenchmarkJSONMarshal; the figures are in
// docs/performance.md). The output is byte for byte what
// protojson.MarshalOptions{EmitDefaultValues: true} followed by
// json.Compact gives (fields in declaration order, 64-bit integers as
// strings, durations as protojson writes them, empty lists as []);
// TestFastJSONMatchesProtojson holds it to that, and
// TestFastJSONCoversEveryField, driven by the message descriptors, fails
// when a field is added that the encoder does not write. Anything the fast path
// does not cover exactly (invalid UTF-8, a duration out of range, a
// non-finite weight) makes it report false, and the caller falls back to
// protojson.

// appendFast appends m's JSON to dst; ok is false when m is not a message
// the fast path covers.
func appendFast(dst []byte, m any) (out []byte, ok bool) {
	switch m := m.(type) {
	case *ratelimitv1.CheckResponse:
		return appendCheckResponse(dst, m)
	case *ratelimitv1.PeekResponse:
		dst = append(dst, '{')
		if m.GetResponse() != nil {
			dst = append(dst, `"response":`...)
			if dst, ok = appendCheckResponse(dst, m.Response); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	case *ratelimitv1.CheckBatchResponse:
		dst = append(dst, `{"results":[`...)
		for i, r := range m.GetResults() {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, ok = appendCheckResult(dst, r); !ok {
				return dst, false
			}
		}
		return append(dst, "]}"...), true
	}
	return dst, false
}

func appendCheckResult(dst []byte, r *ratelimitv1.CheckResult) ([]byte, bool) {
	ok := true
	dst = append(dst, '{')
	switch v := r.GetResult().(type) {
	case *ratelimitv1.CheckResult_Response:
		if v.Response != nil {
			dst = append(dst, `"response":`...)
			dst, ok = appendCheckResponse(dst, v.Response)
		}
	case *ratelimitv1.CheckResult_Error:
		if v.Error != nil {
			dst = append(dst, `"error":{"code":`...)
			if dst, ok = appendString(dst, v.Error.Code); !ok {
				return dst, false
			}
			dst = append(dst, `,"message":`...)
			if dst, ok = appendString(dst, v.Error.Message); !ok {
				return dst, false
			}
			dst = append(dst, '}')
		}
	}
	return append(dst, '}'), ok
}

func appendCheckResponse(dst []byte, m *ratelimitv1.CheckResponse) ([]byte, bool) {
	ok := true
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, m.Allowed)
	dst = append(dst, `,"limit":`...)
	dst = appendUint(dst, m.Limit)
	dst = append(dst, `,"remaining":`...)
	dst = appendUint(dst, m.Remaining)
	if m.ResetAfter != nil {
		dst = append(dst, `,"resetAfter":`...)
		if dst, ok = appendDuration(dst, m.ResetAfter); !ok {
			return dst, false
		}
	}
	if m.RetryAfter != nil {
		dst = append(dst, `,"retryAfter":`...)
		if dst, ok = appendDuration(dst, m.RetryAfter); !ok {
			return dst, false
		}
	}
	if st := m.Stats; st != nil {
		dst = append(dst, `,"stats":{"bucket":`...)
		dst = appendInt(dst, st.Bucket)
		dst = append(dst, `,"current":`...)
		dst = appendUint(dst, st.Current)
		dst = append(dst, `,"previous":`...)
		dst = appendUint(dst, st.Previous)
		dst = append(dst, `,"previousWeight":`...)
		if dst, ok = appendFloat(dst, st.PreviousWeight); !ok {
			return dst, false
		}
		dst = append(dst, `,"estimate":`...)
		dst = appendUint(dst, st.Estimate)
		dst = append(dst, `,"regions":[`...)
		for i, rc := range st.Regions {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"region":`...)
			if dst, ok = appendString(dst, rc.GetRegion()); !ok {
				return dst, false
			}
			dst = append(dst, `,"current":`...)
			dst = appendUint(dst, rc.GetCurrent())
			dst = append(dst, `,"previous":`...)
			dst = appendUint(dst, rc.GetPrevious())
			if rc.GetAge() != nil {
				dst = append(dst, `,"age":`...)
				if dst, ok = appendDuration(dst, rc.Age); !ok {
					return dst, false
				}
			}
			dst = append(dst, `,"previousMarks":[`...)
			for i, m := range rc.GetPreviousMarks() {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"atMs":`...)
				dst = appendInt(dst, m.GetAtMs())
				dst = append(dst, `,"count":`...)
				dst = appendUint(dst, m.GetCount())
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
			dst = append(dst, '}')
		}
		dst = append(dst, `],"elapsedMs":`...)
		dst = appendInt(dst, st.ElapsedMs)
		dst = append(dst, `,"whole":`...)
		dst = appendUint(dst, st.Whole)
		dst = append(dst, `,"terms":[`...)
		for i, t := range st.Terms {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"count":`...)
			dst = appendUint(dst, t.GetCount())
			dst = append(dst, `,"numerator":`...)
			dst = appendUint(dst, t.GetNumerator())
			dst = append(dst, `,"denominator":`...)
			dst = appendUint(dst, t.GetDenominator())
			dst = append(dst, '}')
		}
		dst = append(dst, "]}"...)
	}
	dst = append(dst, `,"shadow":`...)
	dst = strconv.AppendBool(dst, m.Shadow)
	dst = append(dst, `,"scope":`...)
	name, known := ratelimitv1.Scope_name[int32(m.Scope)]
	if !known {
		return dst, false // protojson writes the number
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, `"}`...), true
}

func appendUint(dst []byte, n uint64) []byte {
	dst = append(dst, '"')
	dst = strconv.AppendUint(dst, n, 10)
	return append(dst, '"')
}

func appendInt(dst []byte, n int64) []byte {
	dst = append(dst, '"')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '"')
}

// appendFloat writes a double as protojson does (encoding/json's format);
// non-finite values are left to protojson.
func appendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as in encoding/json.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendDuration writes a non-negative duration as protojson does:
// seconds with 0, 3, 6 or 9 fractional digits and an "s". Negative or
// out-of-range durations are left to protojson.
func appendDuration(dst []byte, d *durationpb.Duration) ([]byte, bool) {
	secs, nanos := d.GetSeconds(), int64(d.GetNanos())
	if secs < 0 || secs > 315_576_000_000 || nanos < 0 || nanos >= 1e9 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = strconv.AppendInt(dst, secs, 10)
	if nanos != 0 {
		digits := 9
		for digits > 3 && nanos%1000 == 0 {
			nanos /= 1000
			digits -= 3
		}
		dst = append(dst, '.')
		var buf [9]byte
		for i := digits - 1; i >= 0; i-- {
			buf[i] = byte('0' + nanos%10)
			nanos /= 10
		}
		dst = append(dst, buf[:digits]...)
	}
	return append(dst, `s"`...), true
}

// appendString writes s as a JSON string exactly as protojson escapes it;
// invalid UTF-8 (an error in protojson) is left to protojson.
func appendString(dst []byte, s string) ([]byte, bool) {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return dst, false
			}
			dst = append(dst, s[i:i+n]...)
			i += n
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= ' ':
			dst = append(dst, c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		default:
			// protojson writes \u and the hex digits, zero-padded to 4, lower case.
			dst = append(dst, '\\', 'u', '0', '0', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		}
		i++
	}
	return append(dst, '"'), true
}
