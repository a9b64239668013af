package gateway

import (
	"context"

	"github.com/better-compute/commands/controlplane/queue"
)

// ReasonKindMismatch is the waiting reason of a pending command whose kind
// the node runs with another manifest than the registry's.
const ReasonKindMismatch = "kind-mismatch"

// ReasonBatchUnavailable is the waiting reason of a batched command whose
// batch's approval the gateway cannot read (not an outage).
const ReasonBatchUnavailable = "batch-unavailable"

// recordKinds compares the kinds the node reported in Hello with the
// registry and stores the mismatches on the node (nodes get shows them as
// a condition), logging each once per session.
func (s *session) recordKinds(ctx context.Context) error {
	var ms []queue.KindMismatch
	for k, d := range s.kinds {
		m, ok := s.g.queue.Registry().Get(k)
		if !ok || d == "" {
			continue
		}
		if _, runs := s.g.queue.Registry().Matching(k, d); runs {
			continue
		}
		ms = append(ms, queue.KindMismatch{Kind: k, NodeDigest: d, RegistryDigest: m.Digest(), RegistryVer: m.Version})
		s.logger.Warn("node runs another manifest of this kind than the registry", "kind", k, "node_digest", d, "registry_digest", m.Digest(), "registry_version", m.Version)
		s.mismatchLogged[k] = true
	}
	return s.dbErr(ctx, "recording kind mismatches", s.g.queue.RecordKindMismatches(ctx, s.g.pool, s.id.NodeID, ms))
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}
