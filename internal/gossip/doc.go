// Package gossip owns membership and cross-region replication: a pool of
// nodes from every region over hashicorp/memberlist, each node sending its
// region's per-bucket totals to the other regions and max-merging theirs
// into the local [Store].
//
// # Invariants
//
// The package keeps DESIGN.md's replication invariants: a remote region's
// count changes only by max-merge of a total that region reported (never
// down, never above its truth); every message is idempotent and order-free
// (totals, not deltas); and after a bucket closes and reconciliation has
// run, every reachable region holds the same vector for it.
//
// # Flow
//
//   - Dirty records the local total of a (key, window, bucket) after each
//     admitted decision, in a bounded map.
//   - Every FlushInterval the node sends the dirty totals to each other
//     region, batched per destination, to the key's owner there (rendezvous
//     hashing over that region's live members); the owner merges each
//     batch with one Store.Merge call. Each total is sent in two
//     consecutive flushes unless a newer one replaces it (the echo), so a
//     lost UDP packet is repaired a flush later. It also tells one other node of its
//     own region (the key's local owner, "buddy") which buckets it touched.
//   - A bucket's end plus Grace after, every node that touched it (or heard
//     of it from a buddy) reads its full vector with Store.Vectors and sends
//     every region's total to every other region over TCP, retrying until
//     the bucket expires (reconciliation).
//   - memberlist's push-pull carries the recently reconciled totals
//     (anti-entropy, at most MaxStateBytes).
//
// # Encryption
//
// With Config.SecretKey or Config.SecretKeys, memberlist encrypts every
// packet and stream with the primary key (AES-GCM) and decrypts with any
// installed key; peers without one are refused. Node.InstallKey, UseKey,
// RemoveKey and SetKeys rotate keys at run time without losing a member,
// in the three steps keyring.go describes.
//
// See wire.go for the wire format and fault.go for the fault-injecting
// transport used by tests and demos.
package gossip
