// Package region owns the regional store: a key's counts in this region's
// Redis (standalone, Sentinel or Cluster) or in memory, behind one
// interface, with every decision made atomically in one store round trip,
// and the layers that keep deciding when Redis cannot.
//
// [Open] composes the store a node runs from one [Config]: the in-memory
// store alone, or Redis behind a [Failover] (with an in-memory fallback)
// behind an optional [DenyCache]. The [Stack] it returns names each layer
// and reads their counters at once ([Stack.Stats], [Stack.Collectors]).
// The layers' own constructors ([NewMemory], [NewRedis], [NewFailover],
// [NewDenyCache]) remain for tests and tools that need one layer.
//
// [NewRedis] takes a URL in one of these forms (query parameters are
// go-redis's: dial_timeout, pool_size, ...):
//
//	redis://[user:password@]host:port[/db]         standalone
//	rediss://[user:password@]host:port[/db]        standalone over TLS
//	redis://host1:port1?cluster=true                 Cluster, seeded from host1
//	redis://host1:port1?addr=host2:port2&addr=...    Cluster (any addr= makes one;
//	                                                 cluster=true is optional then)
//	redis+sentinel://[user:password@]s1:p1,s2:p2/mastername[/db]
//	rediss+sentinel://...                            Sentinel (TLS to all)
//	redis://s1:p1?master_name=m&addr=s2:p2           Sentinel, go-redis's own form
//
// In the Sentinel forms the user info authenticates to the sentinels and,
// unless username/password parameters say otherwise, to the master.
//
// The user info is Redis AUTH: a password alone for requirepass, or an ACL
// user and its password (the store only touches keys under "rl:", so the
// user can be confined to ~rl:*). [RedisConfig.Password] gives the password
// outside the URL. rediss:// verifies the server against the system's roots
// unless [RedisConfig.TLSConfig] gives a CA pool or client certificates.
// Errors never repeat a URL's password, and [RedactURL] masks every secret
// a URL may hold (user info, password or token query parameters) for logs.
//
// [NewFailover] wraps a primary store (Redis) so that a decision never
// waits longer than a timeout for it, a circuit breaker stops calling it
// while it is down, and a policy decides meanwhile: from an in-memory
// fallback that counts under a region of its own (local), allow all (open)
// or deny all (closed).
//
// Counts are kept per region: a counter bucket is a vector with one count
// per region, of which only the local region's ever grows by a decision;
// the others grow only by [Store.Merge], a max-merge of the totals other
// regions report, at most [MaxRegionsPerBucket] regions per bucket. Sums
// over regions saturate. The contract every Store meets is the test suite
// in package storetest.
//
// [DenyCache] wraps a Store (normally Redis) and answers from memory the
// requests that a denial it remembers still denies.
package region
