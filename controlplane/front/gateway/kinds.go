package gateway

import (
	"context"
	"fmt"
	"strings"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
)

// Waiting reasons of a pending command the gateway holds, each on the
// command in the API (waitingReason, waitingMessage and, where a person
// must act, blockedBy).
const (
	// ReasonKindMismatch: the node runs another manifest of the kind than
	// the registry (neither a registered digest nor a version a registered
	// manifest's compatibleVersions holds).
	ReasonKindMismatch = "kind-mismatch"
	// ReasonKindNotLoaded: the node's Hello lists its kinds and this one is
	// not among them.
	ReasonKindNotLoaded = "kind-not-loaded"
	// ReasonPluginRefused: the node's bcd refused the plugin file that
	// served the kind when it last ran it (a stale pin, a file made
	// writable, …).
	ReasonPluginRefused = "plugin-refused"
	// ReasonBatchUnavailable: the command's batch approval cannot be read
	// (not an outage).
	ReasonBatchUnavailable = "batch-unavailable"
)

// recordKinds compares the kinds the node reported in Hello with the
// registry and stores, on the node, what it reported (its kinds, their
// versions and how the registry sees each; the plugin files it refused)
// and the mismatches (nodes get shows them as a condition), logging each
// once per session.
func (s *session) recordKinds(ctx context.Context) error {
	var ms []queue.KindMismatch
	reported := make([]queue.HelloKind, 0, len(s.kinds))
	for k, kd := range s.kinds {
		hk := queue.HelloKind{Kind: k, Version: kd.GetVersion(), Digest: kd.GetDigest()}
		m, status, _ := s.g.queue.Registry().Dispatchable(k, kd.GetVersion(), kd.GetDigest())
		hk.Status, hk.RegistryVersion = status, m.Version
		reported = append(reported, hk)
		switch status {
		case kinds.StatusMismatch:
			ms = append(ms, queue.KindMismatch{Kind: k, NodeDigest: kd.GetDigest(), RegistryDigest: m.Digest(), RegistryVer: m.Version})
			s.logger.Warn("node runs another manifest of this kind than the registry", "kind", k, "node_version", kd.GetVersion(),
				"node_digest", kd.GetDigest(), "registry_digest", m.Digest(), "registry_version", m.Version)
			s.mismatchLogged[k] = true
		case kinds.StatusCompatible:
			s.logger.Info("node runs an unregistered version of this kind within a registered manifest's compatibleVersions; dispatching under it",
				"kind", k, "node_version", kd.GetVersion(), "node_digest", kd.GetDigest(), "registry_version", m.Version, "compatible_versions", m.CompatibleVersions)
		}
	}
	refused := make([]queue.RefusedPlugin, 0, len(s.refused))
	for _, r := range s.refused {
		refused = append(refused, queue.RefusedPlugin{Plugin: r.GetPlugin(), Reason: r.GetReason(), Message: r.GetMessage(),
			PinnedSHA256: r.GetPinnedSha256(), FoundSHA256: r.GetFoundSha256(), Kinds: r.GetKinds()})
		s.logger.Warn("the node's bcd refused a plugin", "plugin", r.GetPlugin(), "reason", r.GetReason(), "kinds", strings.Join(r.GetKinds(), ","))
	}
	return s.dbErr(ctx, "recording the node's kinds", s.g.queue.RecordHello(ctx, s.g.pool, s.id.NodeID, reported, refused, ms))
}

// route says under which registered version the node runs kind k ("" when
// the node named no digest: the node decides), or why k's commands must wait
// for a person (blocked). A node whose Hello lists no kinds at all (a
// simulated one) is sent everything, as before kinds were reported.
func (s *session) route(k string) (version string, blocked *queue.Blocked) {
	kd, loaded := s.kinds[k]
	if !loaded {
		if len(s.kinds) == 0 {
			return "", nil
		}
		return "", s.notLoaded(k)
	}
	if kd.GetDigest() == "" {
		return "", nil
	}
	m, status, ok := s.g.queue.Registry().Dispatchable(k, kd.GetVersion(), kd.GetDigest())
	switch {
	case ok:
		return m.Version, nil
	case status == kinds.StatusUnregistered:
		return "", nil // the queue refused it at enqueue; the node decides
	}
	nv := kd.GetVersion()
	if nv == "" {
		nv = "unknown version"
	}
	return "", &queue.Blocked{
		Reason: ReasonKindMismatch, Kind: k,
		Message: fmt.Sprintf("node %s runs another manifest of %s (%s, digest %s) than the registry's %s (digest %s)",
			s.id.NodeID, k, nv, short(kd.GetDigest()), m.Version, short(m.Digest())),
		Fix: fmt.Sprintf("register the node's manifest (bcd kinds --json on the node, into bc-server's kindsDir, then reload bc-server), "+
			"declare compatibleVersions covering %s in the registered manifest, or install %s %s on the node", nv, k, m.Version),
		NodeDigest: kd.GetDigest(), NodeVersion: kd.GetVersion(), RegistryDigest: m.Digest(), RegistryVersion: m.Version,
	}
}

// notLoaded explains a kind the node's Hello does not list: a plugin it
// refused that served the kind (a stale pin names both digests), or no
// plugin at all.
func (s *session) notLoaded(k string) *queue.Blocked {
	for _, r := range s.refused {
		for _, rk := range r.GetKinds() {
			if rk != k {
				continue
			}
			b := &queue.Blocked{Reason: ReasonPluginRefused, Kind: k, Plugin: r.GetPlugin(),
				PinnedSHA256: r.GetPinnedSha256(), FoundSHA256: r.GetFoundSha256()}
			if r.GetReason() == "pin-mismatch" {
				b.Message = fmt.Sprintf("node %s does not load %s: its bcd refused the plugin %s, whose file has SHA-256 %s but bcd's config pins %s (a stale pin)",
					s.id.NodeID, k, r.GetPlugin(), short(r.GetFoundSha256()), short(r.GetPinnedSha256()))
				b.Fix = fmt.Sprintf("on the node, check the file is the binary you meant to install, set pluginSha256.%s: %s in bcd's config (or put the pinned binary back), then run bcd reload",
					r.GetPlugin(), r.GetFoundSha256())
			} else {
				b.Message = fmt.Sprintf("node %s does not load %s: its bcd refused the plugin %s (%s): %s", s.id.NodeID, k, r.GetPlugin(), r.GetReason(), r.GetMessage())
				b.Fix = "fix the plugin file on the node as the message says, then run bcd reload (bcd kinds shows what it loads)"
			}
			return b
		}
	}
	b := &queue.Blocked{Reason: ReasonKindNotLoaded, Kind: k,
		Message: fmt.Sprintf("node %s does not load %s: no plugin in its bcd's plugin directory serves it", s.id.NodeID, k),
		Fix:     "install the plugin that serves " + k + " in bcd's pluginDir on the node, then run bcd reload (bcd kinds lists what the node loads)",
	}
	if len(s.refused) > 0 {
		names := make([]string, 0, len(s.refused))
		for _, r := range s.refused {
			names = append(names, r.GetPlugin()+" ("+r.GetReason()+")")
		}
		b.Message += "; bcd refused " + strings.Join(names, ", ")
	}
	return b
}

// hold records why c waits, once per change, and logs it once per kind and
// session.
func (s *session) hold(ctx context.Context, c queue.Command, b *queue.Blocked) error {
	msg := b.Message + ": " + b.Fix
	if s.waitingSaid[c.ID] == b.Reason+"\x00"+msg {
		return nil // recorded already, by this session
	}
	wrote, err := s.g.queue.SetWaiting(ctx, s.g.pool, s.id.NodeID, c.ID, b.Reason, msg, b)
	if err != nil {
		return s.dbErr(ctx, "recording why a command waits", err)
	}
	if len(s.waitingSaid) >= 4096 {
		clear(s.waitingSaid) // settled ones linger here; forgetting costs one idle write each
	}
	s.waitingSaid[c.ID] = b.Reason + "\x00" + msg
	if wrote && !s.mismatchLogged[c.Kind] {
		s.mismatchLogged[c.Kind] = true
		s.logger.Warn("holding the node's commands of a kind until a person acts", "kind", c.Kind, "reason", b.Reason, "why", b.Message, "fix", b.Fix)
	}
	return nil
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}
