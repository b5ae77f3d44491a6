// The WAN emulator of the multi-region demo: a module of its own, so that
// its NFQUEUE and netlink dependencies stay out of rlcluster's.
module github.com/rlcluster/rlcluster/deploy/multiregion/wanem

go 1.26.0

require (
	github.com/florianl/go-nfqueue/v2 v2.0.2
	github.com/mdlayher/netlink v1.7.2
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/mdlayher/socket v0.4.1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
