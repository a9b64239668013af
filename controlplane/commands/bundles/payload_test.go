package bundles_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/plugins/logs/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

func TestMergePayload(t *testing.T) {
	f := bundles.UploadFields{UploadURL: "https://cp.example.com/v1/blobs/support-bundles/n/k.bundle?bc-signature=ab", MaxBytes: 1 << 20, SupportBundle: true}
	v, err := kind.NewValidator(manifest.Manifest)
	require.NoError(t, err)

	// The caller's payload without upload fields is refused by the schema;
	// merged, it is what the node runs.
	require.Error(t, v.Validate([]byte(`{"since":"2h"}`)))
	out, err := bundles.MergePayload(json.RawMessage(`{"since":"2h","units":["kubelet.service"]}`), "support-bundles/n/k.bundle", f)
	require.NoError(t, err)
	require.NoError(t, v.Validate(out))
	require.JSONEq(t, `{"since":"2h","units":["kubelet.service"],"uploadUrl":"https://cp.example.com/v1/blobs/support-bundles/n/k.bundle?bc-signature=ab","maxBytes":1048576,"supportBundle":true,"bundleKey":"support-bundles/n/k.bundle"}`, string(out))

	out, err = bundles.MergePayload(nil, "k", f)
	require.NoError(t, err)
	require.NoError(t, v.Validate(out))

	for _, bad := range []string{`{"uploadUrl":"https://evil/"}`, `{"maxBytes":1}`, `{"supportBundle":false}`, `{"bundleKey":"x"}`} {
		_, err = bundles.MergePayload(json.RawMessage(bad), "k", f)
		require.ErrorIs(t, err, bundles.ErrReservedField, bad)
	}
	_, err = bundles.MergePayload(json.RawMessage(`[]`), "k", f)
	require.Error(t, err)
}
