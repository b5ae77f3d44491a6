package region

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// DefaultInfoTimeout bounds the INFO calls of one scrape of
// [Redis.InfoCollector].
const DefaultInfoTimeout = time.Second

// RedisInfo is what INFO tells of the store's Redis, summed over the
// primaries of a Cluster.
type RedisInfo struct {
	Keys       uint64 // keys in every database (INFO keyspace)
	UsedMemory uint64 // bytes Redis has allocated (INFO memory, used_memory)
	MaxMemory  uint64 // its maxmemory, 0 when unbounded
}

// Info asks Redis (each primary of a Cluster) for its key count and
// memory.
func (r *Redis) Info(ctx context.Context) (RedisInfo, error) {
	var mu sync.Mutex
	var sum RedisInfo
	one := func(ctx context.Context, c redis.Cmdable) error {
		s, err := c.Info(ctx, "keyspace", "memory").Result()
		if err != nil {
			return fmt.Errorf("redis INFO: %w", err)
		}
		in := parseInfo(s)
		mu.Lock()
		sum.Keys += in.Keys
		sum.UsedMemory += in.UsedMemory
		sum.MaxMemory += in.MaxMemory
		mu.Unlock()
		return nil
	}
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
		return sum, err
	}
	return sum, one(ctx, r.c)
}

// parseInfo reads the key counts (db<N>:keys=<k>,...), used_memory and
// maxmemory from INFO's text.
func parseInfo(s string) RedisInfo {
	var in RedisInfo
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "db"):
			for _, kv := range strings.Split(val, ",") {
				if k, v, ok := strings.Cut(kv, "="); ok && k == "keys" {
					n, _ := strconv.ParseUint(v, 10, 64)
					in.Keys += n
				}
			}
		case name == "used_memory":
			in.UsedMemory, _ = strconv.ParseUint(val, 10, 64)
		case name == "maxmemory":
			in.MaxMemory, _ = strconv.ParseUint(val, 10, 64)
		}
	}
	return in
}

// InfoCollector returns a collector that asks Redis for its key count and
// memory on each scrape, within timeout (default [DefaultInfoTimeout]):
//
//	rlcluster_redis_keys                 keys in Redis (every database, every primary)
//	rlcluster_redis_used_memory_bytes    used_memory
//	rlcluster_redis_maxmemory_bytes      maxmemory (0: unbounded)
//	rlcluster_redis_info_up              1 when the last INFO answered in time, else 0
//
// A scrape whose INFO fails or times out exports only the up gauge, at 0.
func (r *Redis) InfoCollector(timeout time.Duration) prometheus.Collector {
	if timeout <= 0 {
		timeout = DefaultInfoTimeout
	}
	return &infoCollector{
		r:       r,
		timeout: timeout,
		keys:    prometheus.NewDesc("rlcluster_redis_keys", "Keys in the store's Redis (INFO keyspace, every database, summed over a Cluster's primaries), read on each scrape.", nil, nil),
		used:    prometheus.NewDesc("rlcluster_redis_used_memory_bytes", "Bytes the store's Redis has allocated (INFO memory used_memory, summed over a Cluster's primaries), read on each scrape.", nil, nil),
		max:     prometheus.NewDesc("rlcluster_redis_maxmemory_bytes", "maxmemory of the store's Redis (0: unbounded), summed over a Cluster's primaries.", nil, nil),
		up:      prometheus.NewDesc("rlcluster_redis_info_up", "1 when the last scrape's INFO answered within its timeout, else 0.", nil, nil),
	}
}

type infoCollector struct {
	r                   *Redis
	timeout             time.Duration
	keys, used, max, up *prometheus.Desc
}

func (c *infoCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.used
	ch <- c.max
	ch <- c.up
}

func (c *infoCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	in, err := c.r.Info(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(in.Keys))
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(in.UsedMemory))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(in.MaxMemory))
}
