package labels_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// Selector.Matches says it "decides the same" as the SQL it compiles: a run
// resolves its targets with the SQL, the console and the tests with
// Matches. Every selector below is evaluated by real PostgreSQL against
// every label set and must agree with Matches on each.
func TestSQLAgreesWithMatches(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	selectors := []string{
		"", "gpu=h200", "gpu==h200", "gpu!=h200", "rack in (r1,r2)", "rack notin (r1,r2)",
		"drain", "!drain", "gpu=h200,rack in (r1,r2)", "gpu!=h200,!cordon",
		"site.example/row=7", "zone in (a)", "zone notin (a),drain",
	}
	nodes := []map[string]string{
		{},
		{"gpu": "h200"},
		{"gpu": "h100", "rack": "r1"},
		{"gpu": "h200", "rack": "r2", "drain": ""},
		{"gpu": "h200", "rack": "r3", "cordon": "yes"},
		{"rack": "r1", "drain": "x", "site.example/row": "7"},
		{"zone": "a", "drain": ""},
		{"zone": "b", "gpu": "h200", "site.example/row": "8"},
	}
	for _, text := range selectors {
		sel, err := labels.Parse(text)
		require.NoError(t, err, text)
		cond, args := sel.SQL("n.labels", 2)
		for _, node := range nodes {
			doc, err := json.Marshal(node)
			require.NoError(t, err)
			var got bool
			q := fmt.Sprintf(`SELECT %s FROM (SELECT $1::jsonb AS labels) n`, cond)
			require.NoError(t, db.QueryRow(ctx, q, append([]any{string(doc)}, args...)...).Scan(&got), "%s: %s", text, q)
			require.Equal(t, sel.Matches(node), got, "selector %q on %v: Matches and SQL disagree", text, node)
		}
	}
}
