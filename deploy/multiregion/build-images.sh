#!/usr/bin/env bash
# build-images.sh: build every image the multi-region demo needs, locally,
# from this machine's Go toolchain and Debian packages. No registry is used.
#
# Images (tags match the public names compose.yaml uses, so on a machine that
# can pull, this script is optional for all but the rlcluster/* ones):
#   rlcluster/rlnode:dev        FROM scratch, static rlnode (CGO_ENABLED=0)
#   rlcluster/iptables-base:dev FROM scratch, Debian's iptables (nft+legacy) and its libraries
#   rlcluster/wanem:dev         FROM rlcluster/iptables-base:dev, static wanem
#   redis:7                     FROM scratch, Debian's redis-server/redis-cli and their libraries
#   grafana/k6:1.8.1            FROM scratch, k6 built by `go install go.k6.io/k6@v1.8.1`
#   prom/prometheus:v2.42.0     FROM scratch, Debian's prometheus 2.42 binary
# Grafana has no Debian package and cannot be built here: it stays in the
# compose file's `grafana` profile, for machines that can pull grafana/grafana.
#
# Idempotent: Go and Docker caches make a second run take seconds.
# Usage: deploy/multiregion/build-images.sh [image...]   (default: all)
#   names: rlnode wanem redis k6 prometheus
#   k6-binary only builds k6 into the cache (no Docker needed); CI starts it
#   early, in the background, so that the e2e finds it built.
# Env: INSTALL_DEPS=1 apt-get installs missing Debian packages (needs root).
#      RLNODE_OPTIONAL=1 only warns when cmd/rlnode does not exist yet.
#      RLNODE_BIN=path uses that static rlnode binary instead of building one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/rlcluster-images.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rlcluster"
mkdir -p "$cache"
K6_VERSION=v1.8.1

log() { printf '== %s\n' "$*" >&2; }

need_pkg() { # need_pkg binary debian-package
	command -v "$1" >/dev/null 2>&1 && return 0
	if [ "${INSTALL_DEPS:-0}" = 1 ]; then
		log "installing $2"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
	else
		echo "missing $1: apt-get install $2 (or rerun with INSTALL_DEPS=1)" >&2
		exit 1
	fi
}

# add_bin ROOTFS FILE... copies each file and every shared library it needs
# (per ldd, including the dynamic loader) into ROOTFS at the same paths.
add_bin() {
	local rootfs="$1"
	shift
	local f lib
	for f in "$@"; do
		cp -L --parents "$f" "$rootfs/"
		# ldd prints "name => /path (addr)" or "/path (addr)"; static files print nothing useful.
		while read -r lib; do
			if [ -n "$lib" ] && [ -e "$lib" ] && [ ! -e "$rootfs$lib" ]; then
				cp -L --parents "$lib" "$rootfs/"
			fi
		done < <(ldd "$f" 2>/dev/null | awk '/=>/ {print $3; next} /^\t\// {print $1}')
	done
}

# build TAG CONTEXT: docker build with the Dockerfile in CONTEXT.
# The image TAG had before, when it changes, is removed (unless a container
# still uses it), so that rebuilds leave no dangling images behind.
build() {
	local old new
	old=$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true)
	log "docker build $1"
	docker build -q -t "$1" "$2" >/dev/null
	new=$(docker image inspect -f '{{.Id}}' "$1")
	if [ -n "$old" ] && [ "$old" != "$new" ]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
	docker image inspect -f "{{.RepoTags}} {{.Size}} bytes" "$1" >&2
}

image_rlnode() {
	if [ -n "${RLNODE_BIN:-}" ]; then
		local ctx="$work/rlnode"
		mkdir -p "$ctx/rootfs/tmp"
		cp "$RLNODE_BIN" "$ctx/rootfs/rlnode"
	elif [ ! -d "$root/cmd/rlnode" ] || ! ls "$root"/cmd/rlnode/*.go >/dev/null 2>&1; then
		if [ "${RLNODE_OPTIONAL:-0}" = 1 ]; then
			log "cmd/rlnode does not exist yet: skipping rlcluster/rlnode:dev"
			return 0
		fi
		echo "cmd/rlnode does not exist yet" >&2
		exit 1
	else
		local ctx="$work/rlnode"
		mkdir -p "$ctx/rootfs/tmp"
		(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/rootfs/rlnode" ./cmd/rlnode)
	fi
	cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY rootfs/ /
# 8080: Connect/gRPC/HTTP API, /metrics, /healthz, /readyz; 7946: memberlist gossip (TCP+UDP)
EXPOSE 8080 7946 7946/udp
ENV RLNODE_LISTEN=0.0.0.0:8080
ENTRYPOINT ["/rlnode"]
DF
	build rlcluster/rlnode:dev "$ctx"
}

image_wanem() {
	need_pkg xtables-nft-multi iptables
	local ctx="$work/iptables"
	mkdir -p "$ctx/rootfs/run" "$ctx/rootfs/tmp" "$ctx/rootfs/usr/sbin"
	add_bin "$ctx/rootfs" /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi
	# The match and target extensions are dlopen()ed from here.
	local ext
	for ext in /usr/lib/x86_64-linux-gnu/xtables/*.so; do add_bin "$ctx/rootfs" "$ext"; done
	# The multi binaries dispatch on their name.
	for n in iptables iptables-save iptables-restore iptables-nft iptables-nft-save iptables-nft-restore; do
		ln -sf xtables-nft-multi "$ctx/rootfs/usr/sbin/$n"
	done
	for n in iptables-legacy iptables-legacy-save iptables-legacy-restore; do
		ln -sf xtables-legacy-multi "$ctx/rootfs/usr/sbin/$n"
	done
	if [ -e /etc/protocols ]; then cp -L --parents /etc/protocols "$ctx/rootfs/"; fi
	cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DF
	build rlcluster/iptables-base:dev "$ctx"

	ctx="$work/wanem"
	mkdir -p "$ctx"
	# wanem is a Go module of its own (its NFQUEUE and netlink dependencies
	# stay out of rlcluster's).
	(cd "$here/wanem" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/wanem" .)
	cat >"$ctx/Dockerfile" <<'DF'
FROM rlcluster/iptables-base:dev
COPY wanem /usr/local/bin/wanem
ENTRYPOINT ["/usr/local/bin/wanem"]
DF
	build rlcluster/wanem:dev "$ctx"
}

image_redis() {
	need_pkg redis-server redis-server
	local ctx="$work/redis"
	mkdir -p "$ctx/rootfs/data" "$ctx/rootfs/tmp" "$ctx/rootfs/usr/local/bin"
	add_bin "$ctx/rootfs" "$(command -v redis-server)" "$(command -v redis-cli)"
	ln -sf /usr/bin/redis-server "$ctx/rootfs/usr/local/bin/redis-server"
	ln -sf /usr/bin/redis-cli "$ctx/rootfs/usr/local/bin/redis-cli"
	cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
DF
	build redis:7 "$ctx"
}

k6_bin="$cache/k6-$K6_VERSION/k6"

# k6_binary builds k6 into $k6_bin unless it is there already.
k6_binary() {
	if [ ! -x "$k6_bin" ]; then
		log "go install go.k6.io/k6@$K6_VERSION (about 2 minutes cold)"
		mkdir -p "$(dirname "$k6_bin")"
		(cd "$work" && CGO_ENABLED=0 GOBIN="$(dirname "$k6_bin")" GOFLAGS=-trimpath go install -ldflags='-s -w' "go.k6.io/k6@$K6_VERSION")
	fi
}

image_k6() {
	k6_binary
	local bin="$k6_bin"
	local ctx="$work/k6"
	mkdir -p "$ctx/rootfs/usr/bin" "$ctx/rootfs/tmp" "$ctx/rootfs/home/k6"
	cp "$bin" "$ctx/rootfs/usr/bin/k6"
	cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin:/bin K6_NO_USAGE_REPORT=true
WORKDIR /home/k6
ENTRYPOINT ["k6"]
DF
	build grafana/k6:1.8.1 "$ctx"
}

image_prometheus() {
	need_pkg prometheus prometheus
	local ctx="$work/prometheus"
	mkdir -p "$ctx/rootfs/prometheus" "$ctx/rootfs/tmp" "$ctx/rootfs/bin" "$ctx/rootfs/etc/prometheus"
	add_bin "$ctx/rootfs" /usr/bin/prometheus /usr/bin/promtool
	ln -sf /usr/bin/prometheus "$ctx/rootfs/bin/prometheus"
	ln -sf /usr/bin/promtool "$ctx/rootfs/bin/promtool"
	cp -r /etc/prometheus/console_libraries /etc/prometheus/consoles "$ctx/rootfs/etc/prometheus/" 2>/dev/null || true
	cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY rootfs/ /
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
DF
	build prom/prometheus:v2.42.0 "$ctx"
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(rlnode wanem redis k6 prometheus); fi
for t in "${targets[@]}"; do
	case "$t" in
	k6-binary) k6_binary ;;
	rlnode | wanem | redis | k6 | prometheus)
		command -v docker >/dev/null || { echo "docker not found" >&2; exit 1; }
		"image_$t"
		;;
	*) echo "unknown image $t (rlnode wanem redis k6 prometheus, or k6-binary)" >&2; exit 2 ;;
	esac
done
