package manifest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/upgrade"
	"github.com/better-compute/commands/plugins/upgrade/manifest"
)

func TestManifestIsValidAndNamesTheSharedKind(t *testing.T) {
	require.NoError(t, manifest.Manifest.Validate())
	require.Equal(t, upgrade.KindName, manifest.KindName)
	require.True(t, manifest.Manifest.Flags.SelfTerminating)
	require.False(t, manifest.Manifest.Flags.RetrySafe)
}
