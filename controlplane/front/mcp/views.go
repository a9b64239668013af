package mcp

import (
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// dropped are fields an agent has no use for and that only add bulk: the
// raw bytes of an attested result (result shows the same document) and the
// node's signature over it (`better-compute commands verify` checks it).
var dropped = []string{"resultBytes", "nodeSig"}

// commandView is a command as a tool shows it: cleaned, without the raw
// attested bytes, with result, progress and payload each cut to maxField
// bytes of JSON.
func (s *Server) commandView(c *apiv1.Command, maxField int) (map[string]any, error) {
	m, err := protoMap(c)
	if err != nil {
		return nil, err
	}
	for _, k := range dropped {
		delete(m, k)
	}
	m = cleanValue(m, s.cfg.MaxStringLen).(map[string]any)
	for _, k := range []string{"result", "progress", "payload"} {
		capField(m, k, maxField)
	}
	return m, nil
}

// nodeView is a node as get_node shows it, its inventory cut to
// MaxFieldBytes of JSON; list_nodes leaves the inventory out (summary).
func (s *Server) nodeView(n *apiv1.Node, summary bool) (map[string]any, error) {
	m, err := protoMap(n)
	if err != nil {
		return nil, err
	}
	if summary {
		delete(m, "inventory")
	}
	m = cleanValue(m, s.cfg.MaxStringLen).(map[string]any)
	capField(m, "inventory", s.cfg.MaxFieldBytes)
	capField(m, "conditions", s.cfg.MaxFieldBytes)
	return m, nil
}

// batchView is a batch as propose_command_batch shows it: without the
// statement bytes an approver signs (the CLI fetches and shows those).
func (s *Server) batchView(b *apiv1.CommandBatch) (map[string]any, error) {
	m, err := protoMap(b)
	if err != nil {
		return nil, err
	}
	delete(m, "statement")
	m = cleanValue(m, s.cfg.MaxStringLen).(map[string]any)
	capField(m, "scope", s.cfg.MaxFieldBytes)
	return m, nil
}

// runView is a fleet run as the run tools show it: cleaned, its payload and
// the list of refused targets each cut to MaxFieldBytes of JSON.
func (s *Server) runView(r *apiv1.FleetRun) (map[string]any, error) {
	m, err := protoMap(r)
	if err != nil {
		return nil, err
	}
	m = cleanValue(m, s.cfg.MaxStringLen).(map[string]any)
	capField(m, "payload", s.cfg.MaxFieldBytes)
	capField(m, "refused", s.cfg.MaxFieldBytes)
	return m, nil
}
