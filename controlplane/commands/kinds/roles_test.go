package kinds_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/internal/names"
)

// Every role a first-party manifest names is an agent role.
func TestManifestRolesAreRoles(t *testing.T) {
	for _, m := range kinds.FirstParty() {
		for _, r := range m.Roles {
			require.NoError(t, names.Role(r), "%s names role %q", m.Kind, r)
		}
	}
}
