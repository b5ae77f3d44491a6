#!/usr/bin/env bash
# wancut.sh: cut one region of the demo off from the others at the WAN, and
# heal it, while the region's own clients still reach its nodes.
#
#   ./wancut.sh cut ap     # drop every packet between ap and the other regions
#   ./wancut.sh heal ap    # remove those rules
#
# Each prints "applied at <unix ns>" and "done at <unix ns>": the change
# (the rules of every direction go in, or out, in one iptables-restore
# transaction) happened between. With --armed as a third argument it gets
# everything ready and makes the change when a line arrives on its
# standard input (loadtest/partition's -arm), within milliseconds.
# The rules sit at the top of wanem's chain (RLWANEM), which every packet
# between the region networks passes, so nothing crosses between the region
# and the others while they are in; packets already queued in wanem for
# their delay are still delivered. It needs wanem running. As root with
# iptables installed it changes the host's rules directly; otherwise it
# runs iptables inside the wanem container (docker exec). cut waits WANCUT_CHECK seconds (2) and fails when the rules
# dropped nothing by then. Env: PROJECT (rlcluster), the compose project.
set -euo pipefail

declare -A subnet=([us]=172.28.1.0/24 [eu]=172.28.2.0/24 [ap]=172.28.3.0/24)
PROJECT="${PROJECT:-rlcluster}"
CHAIN=RLWANEM
COMMENT="rlcluster wancut"

usage() {
	echo "usage: $0 cut|heal us|eu|ap [--armed]" >&2
	exit 2
}
[ $# = 2 ] || [ $# = 3 ] || usage
action="$1" region="$2" armed=0
if [ $# = 3 ]; then
	[ "$3" = --armed ] || usage
	armed=1
fi
[ -n "${subnet[$region]:-}" ] || usage

# ipt ARGS... and ipt_restore (rules on stdin): iptables of the variant
# that holds wanem's chain.
ipt_bin=
if [ "$(id -u)" = 0 ] && command -v iptables >/dev/null; then
	for b in iptables-nft iptables-legacy iptables; do
		if command -v "$b" >/dev/null && "$b" -w 5 -S "$CHAIN" >/dev/null 2>&1; then
			ipt_bin=$b
			break
		fi
	done
	[ -n "$ipt_bin" ] || { echo "wancut: no iptables holds chain $CHAIN: is wanem running?" >&2; exit 1; }
	ipt() { "$ipt_bin" -w 5 "$@"; }
	ipt_restore() { "$ipt_bin-restore" -w 5 --noflush; }
else
	cid=$(docker ps -q --filter "label=com.docker.compose.project=$PROJECT" --filter label=com.docker.compose.service=wanem)
	[ -n "$cid" ] || { echo "wancut: no wanem container in project $PROJECT" >&2; exit 1; }
	for b in iptables-nft iptables-legacy; do
		if docker exec "$cid" "$b" -w 5 -S "$CHAIN" >/dev/null 2>&1; then
			ipt_bin=$b
			break
		fi
	done
	[ -n "$ipt_bin" ] || { echo "wancut: no iptables in wanem holds chain $CHAIN" >&2; exit 1; }
	ipt() { docker exec "$cid" "$ipt_bin" -w 5 "$@"; }
	ipt_restore() { docker exec -i "$cid" "$ipt_bin-restore" -w 5 --noflush; }
fi

# rules: one DROP per direction between the region and each other region
# (iptables-nft takes one -s and one -d per rule).
rules() {
	local o
	for o in "${!subnet[@]}"; do
		[ "$o" = "$region" ] && continue
		echo "-s ${subnet[$region]} -d ${subnet[$o]}"
		echo "-s ${subnet[$o]} -d ${subnet[$region]}"
	done
}

# now: the time in ns, without forking (bash 5's EPOCHREALTIME).
now() { local t=$EPOCHREALTIME; echo "${t/[.,]/}000"; }

# apply OP: insert (-I CHAIN 1) or delete (-D CHAIN) every rule in one
# iptables-restore transaction, so every direction changes at once. With
# --armed, iptables-restore is started and handed the rules first, and
# the transaction is committed when a line arrives on standard input, so
# that the change lands within milliseconds of it even on a busy machine.
# Prints "applied at <unix ns>" just before the commit and "done at <unix
# ns>" once iptables-restore has returned: the change happened between.
apply() {
	local r
	exec 3>&1
	{
		echo '*filter'
		while read -r r; do echo "$1 $r -m comment --comment \"$COMMENT $region\" -j DROP"; done < <(rules)
		[ "$armed" = 1 ] && read -r _
		echo "applied at $(now)" >&3
		echo COMMIT
	} | ipt_restore
	echo "done at $(now)"
}

case "$action" in
cut)
	apply "-I $CHAIN 1"
	# Every region sends heartbeats every 100 ms: a cut that drops nothing
	# for a while did not happen, and would measure nothing.
	sleep "${WANCUT_CHECK:-2}"
	dropped=$(ipt -L "$CHAIN" -v -x -n 2>/dev/null | awk -v c="$COMMENT $region" 'index($0, c) && $3 == "DROP" {s += $1} END {print s + 0}')
	echo "wancut: cut $region off; ${WANCUT_CHECK:-2} s later its rules had dropped $dropped packets"
	[ "$dropped" -gt 0 ] || { echo "wancut: the cut dropped nothing" >&2; exit 1; }
	;;
heal)
	apply "-D $CHAIN"
	echo "wancut: healed $region"
	;;
*) usage ;;
esac
