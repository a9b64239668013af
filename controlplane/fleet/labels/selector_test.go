package labels_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/fleet/labels"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// "node labels … with a selector (gpu=h200,rack in (r1,r2))": the issue's
// own example parses into two requirements and matches as it reads.
func TestParseTheIssuesSelector(t *testing.T) {
	sel, err := labels.Parse("gpu=h200,rack in (r1,r2)")
	require.NoError(t, err)
	require.Equal(t, []labels.Requirement{
		{Key: "gpu", Op: labels.OpEquals, Values: []string{"h200"}},
		{Key: "rack", Op: labels.OpIn, Values: []string{"r1", "r2"}},
	}, sel.Requirements)
	require.True(t, sel.Matches(map[string]string{"gpu": "h200", "rack": "r2", "zone": "a"}))
	require.False(t, sel.Matches(map[string]string{"gpu": "h200", "rack": "r3"}))
	require.False(t, sel.Matches(map[string]string{"rack": "r1"}))
	require.Equal(t, "gpu=h200,rack in (r1,r2)", sel.String())
}

func TestParseEveryOperator(t *testing.T) {
	sel, err := labels.Parse(" gpu == h200 , zone!=b, rack notin (r9), drain, !cordon , site.example/row=7")
	require.NoError(t, err)
	ops := []labels.Op{}
	for _, r := range sel.Requirements {
		ops = append(ops, r.Op)
	}
	require.Equal(t, []labels.Op{labels.OpEquals, labels.OpNotEquals, labels.OpNotIn, labels.OpExists, labels.OpNotExists, labels.OpEquals}, ops)
	node := map[string]string{"gpu": "h200", "rack": "r1", "drain": "", "site.example/row": "7"}
	require.True(t, sel.Matches(node))
	// != and notin match a node without the key, as Kubernetes' do.
	require.True(t, sel.Matches(map[string]string{"gpu": "h200", "drain": "x", "site.example/row": "7"}))
	node["cordon"] = "yes"
	require.False(t, sel.Matches(node))
	require.Equal(t, []string{"gpu", "zone", "rack", "drain", "site.example/row"}, sel.Keys())
}

// "a selector that does not parse" gets a clear error naming what was wrong.
func TestParseRefusesWithTheRequirementNamed(t *testing.T) {
	for in, want := range map[string]string{
		"gpu=h200,":        "trailing comma",
		"rack in (r1,r2":   "'(' without ')'",
		"rack in r1":       "want key in (…)",
		"rack within (r1)": "want key in (…) or key notin (…)",
		"=h200":            "a label key is empty",
		"gpu=h 200":        "not allowed",
		"-gpu=1":           "not allowed",
		"rack in ((r1))":   "nested parentheses",
		"gpu=h200)":        "without '('",
		"Bad.Prefix/gpu=1": "lower-case DNS name",
		"rack in (r1,,r2)": "value",
		"gpu=" + long(64):  "64 characters long",
	} {
		_, err := labels.Parse(in)
		require.Error(t, err, in)
		require.ErrorIs(t, err, errcode.ErrInvalidInput, in)
		require.Contains(t, err.Error(), want, in)
		require.Contains(t, err.Error(), "selector", in)
	}
}

func long(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}

func TestParseEmptyMatchesEverything(t *testing.T) {
	sel, err := labels.Parse("  ")
	require.NoError(t, err)
	require.True(t, sel.Matches(nil))
	cond, args := sel.SQL("n.labels", 3)
	require.Equal(t, "true", cond)
	require.Empty(t, args)
}

func TestChangeValidateAndApply(t *testing.T) {
	require.ErrorContains(t, labels.Change{}.Validate(), "nothing to change")
	require.ErrorContains(t, labels.Change{Set: map[string]string{"gpu": "h200"}, Remove: []string{"gpu"}}.Validate(), "both set and removed")
	require.ErrorContains(t, labels.Change{Set: map[string]string{"gpu!": "x"}}.Validate(), `label key "gpu!"`)
	require.ErrorContains(t, labels.Change{Set: map[string]string{"gpu": "-x"}}.Validate(), "value")
	c := labels.Change{Set: map[string]string{"rack": "r2"}, Remove: []string{"drain"}}
	require.NoError(t, c.Validate())
	require.Equal(t, map[string]string{"gpu": "h200", "rack": "r2"}, c.Apply(map[string]string{"gpu": "h200", "rack": "r1", "drain": ""}))
	c.Replace = true
	require.Equal(t, map[string]string{"rack": "r2"}, c.Apply(map[string]string{"gpu": "h200"}))
	require.Equal(t, "gpu=h200,rack=r2", labels.String(map[string]string{"rack": "r2", "gpu": "h200"}))
}

// FuzzParse: any text either parses into a selector whose canonical form
// parses to the same requirements, or is refused with INVALID_INPUT; it
// never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"gpu=h200,rack in (r1,r2)", "!drain", "a!=b", "x notin (1,2,3)", "k", "site.example/row==7", "(", "a in ()", ",", "a=b,,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := labels.Parse(s)
		if err != nil {
			if !errorsIsInvalid(err) {
				t.Fatalf("Parse(%q): %v is not INVALID_INPUT", s, err)
			}
			return
		}
		again, err := labels.Parse(sel.String())
		if err != nil {
			t.Fatalf("Parse(%q) gave %q, which does not parse: %v", s, sel.String(), err)
		}
		if again.String() != sel.String() {
			t.Fatalf("canonical form drifted: %q then %q", sel.String(), again.String())
		}
		_, args := sel.SQL("n.labels", 1)
		_ = args
	})
}

func errorsIsInvalid(err error) bool { return errcode.CodeOf(err) == errcode.InvalidInput }
