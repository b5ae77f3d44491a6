package gossip

// Regions returns how many regions the pool has as this node sees it now,
// its own included: the distinct regions of the members that have not
// left. A failed member still counts (a region cut off by a partition
// keeps deciding on its own) until it is forgotten, an hour after it
// failed. It takes a read lock and allocates only for more than a few
// regions; it never blocks on I/O.
func (n *Node) Regions() int {
	var seen [8]string
	regions := seen[:0]
	regions = append(regions, n.cfg.Region)
	n.memMu.RLock()
	defer n.memMu.RUnlock()
	for _, m := range n.members {
		if m.state == "left" || m.region == "" {
			continue
		}
		known := false
		for _, r := range regions {
			if r == m.region {
				known = true
				break
			}
		}
		if !known {
			regions = append(regions, m.region)
		}
	}
	return len(regions)
}
