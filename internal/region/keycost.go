package region

// What one key costs each store, for sizing: a sliding-window key with a
// 16-byte name that has seen one decision (the common case of a flood of
// distinct keys). Longer keys cost their extra bytes about twice in
// memory (the key and its counter's copy) and once in Redis.
// TestKeyCost measures both and fails when a change makes a key cost more
// than stated here, so that budgets derived from these stay true.
const (
	// MemoryKeyBytes is the heap one key holds in the in-memory store.
	MemoryKeyBytes = 1100
	// RedisKeyBytes is the Redis memory (used_memory) one key holds.
	RedisKeyBytes = 400
)
