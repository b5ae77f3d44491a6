#!/usr/bin/env bash
# e2e.sh: end-to-end test of the multi-region demo (about 2 minutes with
# images and Go caches warm; bounded by E2E_TIMEOUT, default 1200 s).
#
#  1. builds the images (build-images.sh; SKIP_BUILD=1 to skip),
#  2. brings the demo up as compose project rlcluster-e2e and waits until
#     every node answers /readyz, sees all six members alive and serves the
#     status page (/ and /status.json: 3 regions x 2 alive),
#  3. runs a short steady k6 scenario over all three regions (its thresholds:
#     per-window over-admission <= OVER_PCT, p99 <= P99_MS, errors < 1%),
#  4. runs steady again (40 s) on us+eu while region ap is cut off
#     (`docker network disconnect` of ap-1 and ap-2, from 8 s to 20 s) and
#     then reconnected; the same thresholds must hold,
#  5. asserts the regions agree again within 30 s of the heal: a Peek of
#     that key on one node per region shows the same per-region counts for
#     a closed bucket, and every node sees six alive members again,
#  6. (with PARTITION=1) offers one key 10x a global limit of 1000 per 10 s from all three
#     regions' nodes at once (loadtest/partition, from the host through the
#     published ports) and cuts ap off at the WAN for 15 s (wancut.sh: both
#     ap nodes stay reachable to ap's clients, and keep deciding), then
#     heals and loads for 14 s more. It fails when any trailing window over
#     the whole cluster held more than (1 + 1/3) x the limit, when the
#     regions did not agree on the bucket closed during the cut within two
#     flush intervals plus the one-way delay of the heal (and on the bucket
#     open at the heal within that plus the reconciliation's grace of its
#     end), or when the regions' Redis hold different per-region counts of
#     any closed bucket of the key afterwards,
#  7. tears everything down, on success and on failure (trap).
#
# With PARTITION=1 the WAN delay is 60 ms one way between every pair of
# regions (WAN_DELAYS overrides it); otherwise compose's 30/60/90 ms.
#
# Env: SKIP_BUILD, E2E_TIMEOUT (1200), OVER_PCT (10), P99_MS (250: ten
#      containers share CI's two cores), KEEP_UP=1 (no teardown),
#      K6=0 (skip steps 3-5), PARTITION=1 (run step 6), WAN_DELAYS,
#      PARTITION_MIN_PRE (20s: the load before the cut, at least; longer
#      gives the steady figures more than the third window).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
PROJECT=rlcluster-e2e
OVER_PCT="${OVER_PCT:-10}"
P99_MS="${P99_MS:-250}"
E2E_TIMEOUT="${E2E_TIMEOUT:-1200}"
# Step 6 is not yet a gate: on a 2-core machine shared with other work it
# passed 3 runs of 9 (docs/design.md), so CI runs steps 1-5 only.
PARTITION="${PARTITION:-0}"
if [ "$PARTITION" = 1 ]; then
	# compose.yaml reads it (it overrides .env's 30/60/90 ms).
	export WAN_DELAYS="${WAN_DELAYS:-us-eu=60ms,eu-ap=60ms,us-ap=60ms}"
fi
results="$here/results/e2e-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$results"

if docker compose version >/dev/null 2>&1; then
	compose=(docker compose -p "$PROJECT" -f compose.yaml)
elif command -v docker-compose >/dev/null; then
	compose=(docker-compose -p "$PROJECT" -f compose.yaml)
else
	echo "e2e: neither 'docker compose' nor docker-compose found" >&2
	exit 1
fi

log() { printf '[e2e %s] %s\n' "$(date +%T)" "$*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}

cleanup() {
	local rc=$1
	kill "$watchdog" 2>/dev/null || true
	if [ $rc -ne 0 ]; then
		log "failed (exit $rc); last logs in $results/compose.log"
		"${compose[@]}" logs --no-color --tail 200 >"$results/compose.log" 2>&1 || true
		tail -n 40 "$results/compose.log" >&2 || true
	fi
	if [ "${KEEP_UP:-0}" != 1 ]; then
		log "tearing down"
		"${compose[@]}" --profile load down -v -t 5 --remove-orphans >/dev/null 2>&1 ||
			"${compose[@]}" down -v -t 5 --remove-orphans >/dev/null 2>&1 || true
		# wanem removes its rules on SIGTERM; make sure none are left.
		if command -v iptables >/dev/null && iptables -S RLWANEM >/dev/null 2>&1; then
			log "removing leftover RLWANEM rules"
			for h in DOCKER-USER FORWARD; do while iptables -D "$h" -j RLWANEM 2>/dev/null; do :; done; done
			iptables -F RLWANEM 2>/dev/null || true
			iptables -X RLWANEM 2>/dev/null || true
		fi
	fi
	exit "$rc"
}
# Bound the whole run: a watchdog stops this script's children (the running
# step) and the script, whose EXIT trap then tears down.
(
	sleep "$E2E_TIMEOUT"
	log "timeout after ${E2E_TIMEOUT}s"
	kill -TERM $$ 2>/dev/null
	pkill -TERM -P $$ 2>/dev/null
) &
watchdog=$!
trap 'cleanup $?' EXIT
trap 'exit 124' TERM INT

start=$(date +%s)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
	log "building images"
	./build-images.sh 2>&1 | grep -v -i -E 'deprecated|buildx|docs.docker.com|^ *$' >&2
fi

log "starting the demo (${compose[*]})"
"${compose[@]}" down -v -t 5 --remove-orphans >/dev/null 2>&1 || true
"${compose[@]}" up -d >"$results/up.log" 2>&1 || { cat "$results/up.log" >&2; fail "compose up"; }

nodes=(us-1 us-2 eu-1 eu-2 ap-1 ap-2)
declare -A port=([us-1]=8111 [us-2]=8112 [eu-1]=8121 [eu-2]=8122 [ap-1]=8131 [ap-2]=8132)
declare -A ip=([ap-1]=172.28.3.11 [ap-2]=172.28.3.12)

# wait_until DESC SECONDS CMD...: poll CMD every second until it succeeds.
wait_until() {
	local desc="$1" secs="$2" t0
	shift 2
	t0=$(date +%s)
	until "$@" >/dev/null 2>&1; do
		[ $(($(date +%s) - t0)) -ge "$secs" ] && fail "$desc not within ${secs}s"
		sleep 1
	done
	log "$desc after $(($(date +%s) - t0))s"
}

all_ready() {
	local n
	for n in "${nodes[@]}"; do curl -fsS -m 2 "http://127.0.0.1:${port[$n]}/readyz" >/dev/null || return 1; done
}
wait_until "all six nodes ready" 90 all_ready

# members N: true when every node reports N alive members.
members_alive() {
	local n want="$1" got
	for n in "${nodes[@]}"; do
		got=$(curl -fsS -m 2 "http://127.0.0.1:${port[$n]}/metrics" |
			awk '/^rlcluster_gossip_members\{/ && /state="alive"/ {s += $NF} END {print s + 0}')
		[ "$got" = "$want" ] || return 1
	done
}
wait_until "all nodes see six alive members" 60 members_alive 6

# The status page: / serves it and /status.json shows 3 regions x 2 alive.
status_ok() {
	local n page st
	for n in "${nodes[@]}"; do
		page=$(curl -fsS -m 2 "http://127.0.0.1:${port[$n]}/") || return 1
		[[ "$page" == *'<title>rlcluster status</title>'* ]] || return 1
		st=$(curl -fsS -m 2 "http://127.0.0.1:${port[$n]}/status.json") || return 1
		python3 -c 'import json,sys
st=json.loads(sys.argv[1])
got=sorted((r["region"], r["alive"]) for r in st["regions"])
sys.exit(0 if st["gossip"] and got==[("ap",2),("eu",2),("us",2)] else 1)' "$st" || return 1
	done
}
wait_until "every status page shows 3 regions x 2 alive members" 20 status_ok

# check RESULT MESSAGE: fail unless RESULT is 0.
check() {
	[ "$1" = 0 ] || fail "$2"
}

run_k6() { # run_k6 NAME TARGETS K6-ENV...
	local name="$1" tg="$2"
	shift 2
	local envs=(-e "TARGETS=$tg" -e "RESULTS_DIR=/results/$(basename "$results")/$name" -e "OVER_PCT=$OVER_PCT" -e "P99_MS=$P99_MS")
	local e
	for e in "$@"; do envs+=(-e "$e"); done
	mkdir -p "$results/$name"
	"${compose[@]}" --profile load run --rm -T "${envs[@]}" k6 run -q /scripts/steady.js >"$results/$name/k6.log" 2>&1
}

ALL='us=http://us-1:8080|http://us-2:8080;eu=http://eu-1:8080|http://eu-2:8080;ap=http://ap-1:8080|http://ap-2:8080'
USEU='us=http://us-1:8080|http://us-2:8080;eu=http://eu-1:8080|http://eu-2:8080'

if [ "${K6:-1}" = 1 ]; then
	log "steady load, all regions (30 s)"
	rc=0
	run_k6 steady "$ALL" DURATION=30 || rc=$?
	cat "$results/steady/steady-summary.txt" >&2 || true
	check $rc "steady k6 thresholds (see $results/steady)"

	# Agreement: Peek key on one node per region; agree when all three show the
	# same bucket index and the same non-zero per-region counts for the previous
	# (closed) bucket, with us and eu in it.
	peek() { # peek PORT -> "bucket region:previous ..."
		local out
		out=$(curl -fsS -m 2 -X POST -H 'Content-Type: application/json' \
			-d "{\"key\":\"$key\",\"hits\":1,\"limit\":{\"limit\":300,\"window\":\"10s\"}}" \
			"http://127.0.0.1:$1/ratelimit.v1.RateLimitService/Peek") || return 1
		# The Python lines start at column 0: an indented one is a syntax error.
		python3 -c 'import json,sys
r=json.loads(sys.argv[1]); r=r.get("response",r); s=r.get("stats",{})
regs=sorted((g.get("region",""),g.get("previous","0")) for g in s.get("regions",[]) if str(g.get("previous","0"))!="0")
print(s.get("bucket","?"), " ".join("%s:%s"%x for x in regs))' "$out"
	}
	agree() {
		local a b c
		a=$(peek 8111) && b=$(peek 8121) && c=$(peek 8131) || return 1
		echo "us: $a | eu: $b | ap: $c" >"$results/agreement.txt"
		[ "$a" = "$b" ] && [ "$b" = "$c" ] && [[ "$a" == *us:* ]] && [[ "$a" == *eu:* ]]
	}

	# The partition: k6 loads us+eu for 40 s on one key; ap-1 and ap-2 are cut
	# off from 8 s to 20 s (longer than a window, so a whole bucket closes while
	# ap is away). ap gets no load meanwhile: its nodes have no network at all.
	# After the heal, with load still flowing, the regions must agree on a closed
	# bucket within 30 s and all nodes must see six alive members again.
	key="e2e-partition-$(date +%s)"
	log "steady load on us+eu, ap cut off at 8 s and reconnected at 20 s (40 s), key $key"
	rc=0
	run_k6 partition "$USEU" DURATION=40 "KEY=$key" &
	k6pid=$!
	sleep 8
	for n in ap-1 ap-2; do
		cid=$("${compose[@]}" ps -q "$n")
		# The daemon has answered "is not connected" for a container it had
		# just disconnected: what matters is that it is off the network.
		if ! docker network disconnect -f "${PROJECT}_ap" "$cid" &&
			docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$cid" | grep -qw "${PROJECT}_ap"; then
			log "$n is still on ${PROJECT}_ap"
			exit 1
		fi
	done
	log "ap disconnected"
	sleep 12
	for n in ap-1 ap-2; do
		cid=$("${compose[@]}" ps -q "$n")
		docker network connect --ip "${ip[$n]}" "${PROJECT}_ap" "$cid"
	done
	log "ap reconnected"
	wait_until "regions agree on a closed bucket of $key after the heal" 30 agree
	cat "$results/agreement.txt" >&2
	wait_until "all nodes see six alive members again" 30 members_alive 6
	wait $k6pid || rc=$?
	cat "$results/partition/steady-summary.txt" >&2 || true
	check $rc "partition k6 thresholds (see $results/partition)"
fi

# The partition at 10x: every region loaded, ap cut off at the WAN (its
# own clients still reach it), the global bound and agreement measured.
if [ "$PARTITION" = 1 ]; then
	pkey="e2e-cut-$(date +%s)"
	log "10x on all regions, ap cut off at the WAN for 15 s (key $pkey, about 60 s)"
	(cd ../.. && go build -o "$results/partition" ./loadtest/partition)
	rc=0
	"$results/partition" -key "$pkey" -limit 1000 -window 10s -factor 10 \
		-cut ap -min-pre "${PARTITION_MIN_PRE:-20s}" -cut-for 15s -after 14s -flush 50ms -grace 50ms -one-way 60ms \
		-arm 2s -cut-cmd "PROJECT=$PROJECT $here/wancut.sh cut ap --armed" \
		-heal-cmd "PROJECT=$PROJECT $here/wancut.sh heal ap --armed" \
		-out "$results/cut" >"$results/cut.log" 2>&1 || rc=$?
	cat "$results/cut.log" >&2
	# Every closed bucket of the key that every region's Redis still
	# holds (they expire about two windows after they open): the same
	# counts of every replica. One script per region, right away.
	now=$(($(date +%s) / 10)) # buckets before this one are closed
	closed_counts() { # closed_counts SERVICE -> "bucket replica=count ..." lines
		local cid
		cid=$("${compose[@]}" ps -q "$1")
		docker exec "$cid" redis-cli --raw eval "
			local out = {}
			for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
				if redis.call('TYPE', k).ok == 'hash' then
					local h, f = redis.call('HGETALL', k), {}
					for i = 1, #h, 2 do
						if not string.find(h[i], '\\255', 1, true) then f[#f + 1] = h[i] .. '=' .. h[i + 1] end
					end
					table.sort(f)
					out[#out + 1] = k .. ' ' .. table.concat(f, ' ')
				end
			end
			return out" 0 "*$pkey*" |
			awk -v now="$now" '{n = split($1, p, ":"); b = p[n]; if (b ~ /^[0-9]+$/ && b + 0 < now) {$1 = b; print}}' | sort
	}
	# All three at once: the buckets expire while the reads run.
	pids=()
	for r in us eu ap; do
		closed_counts "redis-$r" >"$results/cut-redis-$r.txt" &
		pids+=($!)
	done
	wait "${pids[@]}"
	us=$(cat "$results/cut-redis-us.txt") eu=$(cat "$results/cut-redis-eu.txt") ap=$(cat "$results/cut-redis-ap.txt")
	printf 'closed buckets of %s (bucket replica=count ...):\nus:\n%s\neu:\n%s\nap:\n%s\n' "$pkey" "$us" "$eu" "$ap" >"$results/cut-redis.txt"
	cat "$results/cut-redis.txt" >&2
	common=$(join <(echo "$us" | cut -d' ' -f1) <(echo "$eu" | cut -d' ' -f1) | join - <(echo "$ap" | cut -d' ' -f1))
	differ=
	for b in $common; do
		[ "$(grep "^$b " <<<"$us")" = "$(grep "^$b " <<<"$eu")" ] && [ "$(grep "^$b " <<<"$eu")" = "$(grep "^$b " <<<"$ap")" ] || differ+=" $b"
	done
	check $rc "the partition at 10x (see $results/cut.log)"
	[ -n "$common" ] || fail "no closed bucket of $pkey left in every region's Redis (see $results/cut-redis.txt)"
	[ -z "$differ" ] || fail "the regions' Redis hold different counts of closed buckets$differ of $pkey (see $results/cut-redis.txt)"
	log "every region's Redis holds the same counts of the closed buckets $(echo $common) of $pkey"
fi

log "PASS in $(($(date +%s) - start))s (results in $results)"
