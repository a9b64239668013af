package api

import (
	"context"
	"strings"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// kindsServer serves kinds.list and kinds.get: the registered manifests,
// what a console's payload forms and a vendor's checks read.
type kindsServer struct {
	apiv1.UnimplementedKindsServer
	s *Server
}

// List returns every registered kind version to any authenticated caller:
// a manifest is no secret, and a caller needs it to build a payload.
func (k *kindsServer) List(ctx context.Context, req *apiv1.ListKindsRequest) (*apiv1.ListKindsResponse, error) {
	if _, err := identity(ctx); err != nil {
		return nil, err
	}
	out := &apiv1.ListKindsResponse{}
	for _, r := range k.s.queue.Registry().List() {
		p := k.s.kindProto(r)
		if req.GetApiRunnableOnly() && !(p.GetApiRunnable() && p.GetAllowlisted()) {
			continue
		}
		out.Items = append(out.Items, p)
	}
	return out, nil
}

// Get returns one kind version, the newest when none is named.
func (k *kindsServer) Get(ctx context.Context, req *apiv1.GetKindRequest) (*apiv1.Kind, error) {
	if _, err := identity(ctx); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetName()) == "" {
		return nil, invalid("name", "name is required: a kind such as diag.nvml (kinds.list lists them)")
	}
	for _, r := range k.s.queue.Registry().List() {
		if r.Manifest.Kind != req.GetName() {
			continue
		}
		if (req.GetVersion() == "" && r.Newest) || strings.TrimPrefix(r.Manifest.Version, "v") == strings.TrimPrefix(req.GetVersion(), "v") {
			return k.s.kindProto(r), nil
		}
	}
	what := "kind " + req.GetName()
	if req.GetVersion() != "" {
		what += " version " + req.GetVersion()
	}
	return nil, apierr.New(errcode.NotFound, what+" is not registered: kinds.list lists what is, and bc-server's kindsDir is where a manifest goes",
		map[string]string{"kind": req.GetName(), "version": req.GetVersion()})
}

func (s *Server) kindProto(r kinds.Registered) *apiv1.Kind {
	m := r.Manifest
	return &apiv1.Kind{Name: m.Kind, Version: m.Version, Digest: r.Digest, Lane: string(m.Lane), TimeoutSeconds: int64(m.Timeout.D().Seconds()),
		Roles: m.Roles, Flags: &apiv1.KindFlags{RetrySafe: m.Flags.RetrySafe, Destructive: m.Flags.Destructive, SelfTerminating: m.Flags.SelfTerminating, Attested: m.Flags.Attested},
		ApiRunnable: m.APIRunnable, Allowlisted: s.allowlist[m.Kind], PayloadSchema: string(m.PayloadSchema), Description: m.Description,
		Source: string(r.Source), Newest: r.Newest, CompatibleVersions: m.CompatibleVersions}
}
