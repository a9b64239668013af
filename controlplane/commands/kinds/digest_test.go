package kinds_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/sdk/example"
	"github.com/better-compute/commands/sdk/kind"
)

// "The manifest digest is computed over a canonical form (RFC 8785 JSON
// canonicalization or equal), so YAML, JSON, pretty or compact, any key
// order, all hash the same." The guide's own example.echo, as bcd kinds
// --json prints it, as YAML (which reorders the schema's keys), pretty,
// compact and with its keys reversed: the registry's digest is the node's.
func TestDigest_AnyEncodingOfAManifestHashesTheSame(t *testing.T) {
	for _, m := range []kind.Manifest{example.EchoManifest, example.NoopManifest} {
		want := m.Digest()
		j, err := json.Marshal(m)
		require.NoError(t, err)
		pretty, err := json.MarshalIndent(m, "", "    ")
		require.NoError(t, err)
		y, err := yaml.JSONToYAML(j)
		require.NoError(t, err)
		reversed := reverseKeys(t, j)
		for name, doc := range map[string][]byte{"json": j, "pretty": pretty, "yaml": y, "reversed keys": reversed} {
			got, err := kinds.ParseManifests(doc)
			require.NoError(t, err, name)
			require.Len(t, got, 1)
			require.Equal(t, want, got[0].Digest(), "%s: %s", m.Kind, name)
		}
	}
}

func TestDigest_ChangesWhenTheManifestDoes(t *testing.T) {
	m := example.EchoManifest
	other := m
	other.Timeout = kind.Duration(m.Timeout.D() * 2)
	require.NotEqual(t, m.Digest(), other.Digest())
	schema := m
	schema.PayloadSchema = json.RawMessage(`{"type":"object","additionalProperties":true}`)
	require.NotEqual(t, m.Digest(), schema.Digest())
	roles := m
	roles.Roles = append([]string{"discovery"}, m.Roles...)
	require.NotEqual(t, m.Digest(), roles.Digest())
}

// reverseKeys re-encodes a JSON document with every object's keys in
// reverse order, written by hand, since encoding/json sorts them.
func reverseKeys(t *testing.T, b []byte) []byte {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	return []byte(writeReversed(v))
}

func writeReversed(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Sorted descending.
		for i := 0; i < len(keys); i++ {
			for j := i + 1; j < len(keys); j++ {
				if keys[j] > keys[i] {
					keys[i], keys[j] = keys[j], keys[i]
				}
			}
		}
		s := "{ "
		for i, k := range keys {
			if i > 0 {
				s += " , "
			}
			kb, _ := json.Marshal(k)
			s += string(kb) + " : " + writeReversed(x[k])
		}
		return s + " }"
	case []any:
		s := "[ "
		for i, e := range x {
			if i > 0 {
				s += ", "
			}
			s += writeReversed(e)
		}
		return s + " ]"
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}
