package kinds_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
)

// TestFirstPartyLinksOnlyTheManifests keeps the wall between the control
// plane and the plugins: bc-server registers the first-party kinds from
// their manifest packages (plugins/<plugin>/manifest), and must link none
// of the plugins' code, nor what that code needs on a node (D-Bus, systemd,
// NVML through cgo).
func TestFirstPartyLinksOnlyTheManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "./controlplane/cmd/bc-server")
	cmd.Dir = testutil.RepoRoot(t)
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps ./controlplane/cmd/bc-server")

	const plugins = "github.com/better-compute/commands/plugins/"
	var manifests, forbidden []string
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(pkg, plugins) && strings.HasSuffix(pkg, "/manifest"):
			manifests = append(manifests, pkg)
		case strings.HasPrefix(pkg, plugins),
			strings.Contains(pkg, "github.com/godbus/"),
			strings.Contains(pkg, "github.com/coreos/go-systemd"),
			strings.Contains(pkg, "github.com/NVIDIA/go-nvml"):
			forbidden = append(forbidden, pkg)
		}
	}
	require.Empty(t, forbidden, "bc-server links plugin code; import the plugin's manifest package instead")
	require.ElementsMatch(t, []string{
		plugins + "dcgm/manifest",
		plugins + "gpureset/manifest",
		plugins + "logs/manifest",
		plugins + "nvml/manifest",
		plugins + "reboot/manifest",
	}, manifests)
}
