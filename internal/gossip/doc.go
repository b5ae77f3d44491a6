// Package gossip owns membership and cross-region replication: a pool of
// nodes from every region over hashicorp/memberlist, each node sending its
// region's per-bucket totals to the other regions and max-merging theirs
// into the local [Store].
//
// # Invariants
//
// The package keeps the design's replication invariants: a remote region's
// count changes only by max-merge of a total that region reported (never
// down, never above its truth); every message is idempotent and order-free
// (totals, not deltas); and after a bucket closes and reconciliation has
// run, every reachable region holds the same vector for it.
//
// Each region reports only its own totals: its region's entry and those of
// its replicas (region~id, a node's failover fallback or a node on its own
// in-memory store), in flushes and in reconciliation alike, and a receiver
// accepts nothing else from it, except in a relay (KindRelay, below) and
// in a repair answer (KindRepaired):
// the receiver's own region's totals, echoed back, accepted only from a
// member the receiver asked while its repair is open, for buckets that
// began before it asked, and only as far as two sources (regions) agree
// (restore.go). Self-repair max-merges totals this region once reported,
// so it never takes a count above the region's truth.
// Exact agreement still holds between regions that reach each other: every
// region that counted in a bucket touched it, so one of its nodes (or the
// buddy it told, if it died) reconciles the bucket, sending its final
// totals to every other region it reaches and retrying until the bucket
// expires. Every region thus ends holding each region's final totals,
// heard from that region itself. Two regions that cannot reach each other
// directly do not agree through a third; but a region heard again after a
// silence is sent what the sender holds of the other regions (KindRelay),
// and merges it for the regions it does not hear itself: when one split
// follows another, it would otherwise charge a region it has not heard
// since the first only that region's share, not what the region admitted
// meanwhile while others heard it (repair.go's relayed).
//
// # Flow
//
//   - Dirty records the local total of a (key, window, bucket) after each
//     admitted decision, in a bounded map. A calendar window's bucket is
//     named by minus its length and its start (window.Limit.BucketAt), so
//     its end and expiry follow from its name as a fixed window's do.
//   - Every FlushInterval the node sends the dirty totals that are due to
//     each other region, batched per destination, to the key's owner there
//     (rendezvous hashing over that region's live members); the owner
//     merges each batch with one Store.Merge call. A total is due when its
//     unsent hits reach the key's allowance, floor((limit/2 -
//     estimate)/replicas) and at most limit/(20 replicas) (every change
//     of a key at or above half its limit), or MaxStaleness after its oldest unsent hit (urgency.go). An
//     urgent total is sent in two consecutive flushes unless a newer one
//     replaces it (the echo), so a lost UDP packet is repaired a flush
//     later. It also tells one other node of its own region (the key's
//     local owner, "buddy") which buckets it touched.
//   - A bucket's end plus Grace after, every node that touched it (or heard
//     of it from a buddy) reads its vector with Store.Vectors and sends its
//     own region's totals in it to every other region over TCP, retrying
//     until the bucket expires (reconciliation).
//   - memberlist's push-pull carries the recently reconciled totals
//     (anti-entropy, at most MaxStateBytes).
//   - Every HeartbeatInterval the node sends an empty flush frame to every
//     member of the other regions, so that an idle region is known to be
//     alive; GuardView reports, for the burst guard, the regions heard
//     from within Suspicion and the measured one-way delay
//     (freshness.go).
//   - A member that comes alive (new, or back after a partition) is sent
//     its region's share of this region's open totals at once, with the
//     other regions' totals this node merged in buckets that have not
//     expired (KindRelay), and told (KindRejoin) to do the same; a node whose store lost its counts
//     (Config.Epoch) or starts empty (Config.OwnStore) asks its peers for
//     its region's totals (KindRepair) and max-merges their answers
//     (KindRepaired) back, with its own unsent totals and the answerers'
//     own regions' totals (their stores', and their nodes' own latest,
//     in case their stores lost theirs too); after a loss while it runs, it holds its
//     decisions until the answers can be back (GuardView's Restoring).
//     See repair.go and restore.go.
//   - With ExchangeDemand, every flush also sends what the node's burst
//     guard and store refused since the last one, per key and bucket, to
//     every alive member of every region, its own too (KindDemand), and
//     hands what the members send to the guard, so that its shares weigh
//     each region by what it asks for (demand.go). A demand frame carries
//     only the sender's region and moves no count.
//   - With Config.OwnStore (the in-memory store), each node counts as a
//     replica of its own and also replicates to its region's other such
//     nodes, which merge it; so does a node while its store decides from
//     its fallback (Fallbacker), and it gets every total. See apart.go.
//
// # Who may speak
//
// Only members: every frame names its sender and carries the random token
// the sender announced in its metadata when it joined (its incarnation,
// wire.go). memberlist does not tell NotifyMsg who sent a message, so a
// frame is dropped unless its sender is a member this node knows (alive,
// or failed and not yet forgotten; not one that left), other than itself,
// whose token and region (the one it joined with) the frame carries.
// memberlist's encryption does not stop a captured packet from being sent
// again, so a frame also names the receiver's incarnation and carries a
// sequence number: one sent elsewhere, seen before or older than the
// receiver's window is dropped, and so is one from a member memberlist
// holds failed unless it is newer than every frame heard from it and sent
// after it failed (replay.go). Then every field is checked: each total
// names the sender's region or one of its replicas, exactly
// <region>~<6 hex digits> (region.IsReplica: no prefix of the region, no
// name cut to fit; so a region name is at most 57 bytes), or in a relay a
// member region other than the sender's and the receiver's or one of its
// replicas, merged only where the receiver does not hear that region
// itself (at most MaxReplicas replica names per region with live buckets,
// so a bucket holds a bounded number of regions); names are valid UTF-8
// within region.MaxRegionName; a bucket starts no later than now plus one
// window, a calendar bucket's being its own length (older than its expiry
// it is skipped); a count is at most MaxCount (2^53). A frame that fails
// is dropped whole and counted in rlcluster_gossip_dropped_total by
// reason (not_member, misdirected, replay, stale, not_alive,
// foreign_region, unknown_region, old_bucket, future_bucket,
// foreign_kind, replicas_full, repair_busy, malformed). The member,
// clock-offset and freshness maps forget a member that left after
// GossipToTheDeadTime, one that failed after an hour.
//
// The token keeps out processes that never joined; membership itself is
// authenticated only by the gossip key. Without a key anyone who reaches
// the port can join, read every replicated key and report counts for a
// region of its own (and relay counts of the regions a receiver does not
// hear), so New refuses a keyless node on an address other
// than loopback unless Config.Insecure is set. The token is not a
// signature: it travels in member metadata, which every member sees, and a
// node announces its own region when it joins. So every holder of the key
// is trusted for every region: it can join under any region name, or copy
// another member's name and token, and report counts up to MaxCount. The
// checks above bound what such a member can cost (names, buckets, replica
// names) but do not stop it; guard the key as you would the counts.
//
// # Encryption
//
// With Config.SecretKey or Config.SecretKeys, memberlist encrypts every
// packet and stream with the primary key (AES-GCM) and decrypts with any
// installed key; peers without one are refused. Node.InstallKey, UseKey,
// RemoveKey and SetKeys rotate keys at run time without losing a member,
// in the three steps keyring.go describes.
//
// # Readiness
//
// Node.Ready, for a readiness check: a node given seeds that has not seen
// a live member of another region within JoinTimeout (a wrong key, an
// unreachable seed) is not ready. A region that was joined and is cut off
// later stays ready: it keeps deciding from what it knows.
//
// # Files
//
//	node.go        Node: New, Close, broadcasting to a region
//	config.go      Config and its defaults
//	bind.go        Listen; resolving and binding the addresses a host names
//	membership.go  the join and reconnect loops, members, readiness, clocks
//	delegate.go    memberlist's callbacks: metadata, messages, events
//	flush.go       Dirty, and sending the due totals every FlushInterval
//	urgency.go     which dirty totals are due: allowance, staleness, echoes
//	cost.go        the reasons sent bytes are counted under
//	receive.go     the merge loop: validating and max-merging received totals
//	reconcile.go   exchanging a closed bucket's full vector
//	repair.go      self-repair after a store lost its counts; re-sending after a (re)join
//	restore.go     which repair answers are taken: asked, in time, agreed
//	probe.go       healing without waiting for the failure detector
//	freshness.go   heartbeats, and the pool as the burst guard sees it
//	route.go       which node of a region owns a key (rendezvous hashing)
//	wire.go        the wire format
//	replay.go      incarnations and sequence numbers: frames cannot be replayed
//	keyring.go     encryption keys and their rotation
//	metrics.go     the Node's Prometheus metrics
//	accuracy.go    Accuracy: admitted/limit of closed buckets, watched keys' windows
//	log.go         memberlist's log lines into slog; rate-limiting what network input logs
//	fault.go       FaultNetwork, the fault-injecting transport for tests and demos
//
// The design, with the invariants above, is in the repository's
// docs/design.md.
package gossip
