package server

import "fmt"

// ReloadKinds re-reads the kinds directory (bc-server calls it on SIGHUP):
// kinds and versions added there are registered, removed ones are gone, the
// first-party kinds stay. A bad directory changes nothing and is returned.
// Register a kind's new version beside the old one, upgrade the nodes'
// plugins, then remove the old version: commands keep going to nodes that
// run either.
func (s *Server) ReloadKinds(dir string) error {
	if dir == "" {
		return nil
	}
	added, removed, err := s.queue.Registry().Reload(dir)
	if err != nil {
		return fmt.Errorf("reloading kinds from %s: %w", dir, err)
	}
	s.logger.Info("kinds reloaded", "dir", dir, "added", added, "removed", removed)
	s.logKinds("reload")
	return nil
}

// logKinds logs every registered kind version, one line each, with where
// it came from, its digest (which a node's Hello must match, or its version
// fall within compatibleVersions) and apiRunnable (kinds list adds the
// allowlist): what
// an operator compares with `bcd kinds` on a node.
func (s *Server) logKinds(when string) {
	for _, r := range s.queue.Registry().List() {
		m := r.Manifest
		s.logger.Info("kind registered", "when", when, "kind", m.Kind, "version", m.Version, "digest", r.Digest,
			"source", string(r.Source), "newest", r.Newest, "api_runnable", m.APIRunnable,
			"compatible_versions", m.CompatibleVersions)
	}
}
