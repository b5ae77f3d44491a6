package guard

// Reason is what the guard decided of a request, and why when it refused
// it: [Guard.AdmitReason] gives it, and rlcluster_guard_denials_total
// counts the refusals by it.
type Reason uint8

const (
	// Admitted: the request goes to the store.
	Admitted Reason = iota
	// Share: this node's quota of the key's headroom for the current
	// horizon is spent (or is none), while the other regions may still be
	// taking theirs.
	Share
	// Stagger: a limit whose share holds no whole hit for this node, and
	// it is not this node's turn in the stagger's slot, or the headroom
	// past its region's base holds no hit (see [stagger]), or the pool
	// grew past a limit smaller than it a horizon ago or less
	// ([View.Grown]).
	Stagger
	// Charged: what the silent regions are charged leaves no room for the
	// request's hits.
	Charged
	// Restoring: the region's store lost its counts and waits for the
	// other regions' answers.
	Restoring
	// Cut: the store denied a probe or a staggered ask that Admit had
	// decided against a limit lowered to this node's share or base, and
	// the full limit would have admitted it (see [Guard.Done]).
	Cut
	// Joining: this node joined the pool too recently for the other
	// nodes to know it (see [View.Joining]).
	Joining
)

// Reasons lists the reasons of a refusal, in the order of their values.
var Reasons = []Reason{Share, Stagger, Charged, Restoring, Cut, Joining}

// String returns the reason's metric label: "admitted", "share",
// "stagger", "charged", "restoring", "cut" or "joining".
func (r Reason) String() string {
	switch r {
	case Admitted:
		return "admitted"
	case Share:
		return "share"
	case Stagger:
		return "stagger"
	case Charged:
		return "charged"
	case Restoring:
		return "restoring"
	case Cut:
		return "cut"
	case Joining:
		return "joining"
	}
	return "unknown"
}
