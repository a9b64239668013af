package inuse

import (
	"context"

	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/nodespec"
)

// AppliedSpec reads the node spec bcd applied, through the host, for the
// holds and passthroughs that make a GPU busy. Without it a live hold cannot
// be ruled out, and the command must refuse (ReasonNodeSpec).
func AppliedSpec(ctx context.Context, host kind.Host) (nodespec.Spec, int64, error) {
	if host == nil {
		return nodespec.Spec{}, 0, kind.ErrNoHost
	}
	gen, raw, err := host.NodeSpec(ctx)
	if err != nil {
		return nodespec.Spec{}, 0, err
	}
	spec, err := nodespec.Parse(raw)
	if err != nil {
		return nodespec.Spec{}, gen, err
	}
	return spec, gen, nil
}
