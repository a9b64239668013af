package queue

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// "workflow steps use wf:<id>:<stepId>, acceptance uses
// acceptance:<nodeId>:<attempt>:<kind>, and the API derives api:… from your key".
func TestIdempotencyKeys(t *testing.T) {
	require.Equal(t, "wf:wf_1:step-2", WorkflowKey("wf_1", "step-2"))
	require.Equal(t, "acceptance:node_1:3:diag.nvml", AcceptanceKey("node_1", 3, "diag.nvml"))

	k := APIKey("tenant_1", "alice", "reboot-0412")
	require.True(t, strings.HasPrefix(k, "api:"), k)
	require.Equal(t, k, APIKey("tenant_1", "alice", "reboot-0412"), "deterministic")
	require.Len(t, k, len("api:")+32)
	require.Equal(t, strings.ToLower(k), k)
	// Scoped to the tenant and the identity, and unambiguous at the joins.
	require.NotEqual(t, k, APIKey("tenant_2", "alice", "reboot-0412"))
	require.NotEqual(t, k, APIKey("tenant_1", "bob", "reboot-0412"))
	require.NotEqual(t, APIKey("a:b", "c", "d"), APIKey("a", "b:c", "d"))
	require.NotEqual(t, APIKey("ab", "", "c"), APIKey("a", "b", "c"))

	require.Equal(t, strings.TrimPrefix(k, "api:"), SupportBundleKey(k))
}
