package conditions

// The condition types the session client sets from what the gateway sends
// it. A compromised gateway can delay, drop or read frames but should never
// forge intent: what the node refused of it is reported, so an operator
// sees a gateway that tries.
const (
	// TypeTrustBundle is True while the node holds a trust bundle it
	// accepted (the message names its version). It is False when a
	// Welcome's bundle was refused, the node keeping the one it has (reason
	// ReasonRollback, ReasonConflict, ReasonUnverified, ReasonNoAnchor or
	// ReasonMalformed; the message says why), and when the node holds none
	// (ReasonNone: commands go unsigned, unless the node has trust anchors,
	// and then they must be signed by a worker key an anchor certified).
	TypeTrustBundle = "TrustBundle"
	// TypeClockSkew is True when a Welcome's server time was further from
	// the node's clock than maxClockSkew: ReasonRefused once the trust
	// bundle holds command-signing roots (the node's own clock is used),
	// ReasonApplied before (the gateway is trusted then, and the offset is
	// kept). The message gives the figure.
	TypeClockSkew = "ClockSkew"
	// TypeNodeSpec is False when the last node spec the gateway pushed was
	// not applied (ReasonStale: a generation below the applied one;
	// ReasonUnverified: unsigned or not signed by a trusted worker key once
	// the bundle holds roots), True once a spec is applied.
	TypeNodeSpec = "NodeSpec"
)

// Reasons of the trust conditions: bare codes; the message has the words.
const (
	ReasonRollback   = "rollback"
	ReasonConflict   = "conflict"
	ReasonUnverified = "unverified"
	ReasonNoAnchor   = "no-anchor"
	ReasonMalformed  = "malformed"
	ReasonNone       = "none"
	ReasonAccepted   = "accepted"
	ReasonRefused    = "refused"
	ReasonApplied    = "applied"
	ReasonStale      = "stale"
	ReasonError      = "error"
)
