package kinds

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/better-compute/commands/sdk/kind"
	"sigs.k8s.io/yaml"
)

// ParseManifests reads one manifest or a list of manifests from JSON or YAML
// in kind.Manifest's JSON shape. Unknown fields are refused, so a misspelt
// "apiRunable" does not silently make a kind unrunnable. It does not validate
// the manifests; the registry does.
//
// sigs.k8s.io/yaml converts, not go.yaml.in/yaml/v3 as the control plane's
// configs: a manifest is kind.Manifest's JSON (payload schemas are raw
// JSON), and a YAML manifest's YAML 1.1 scalars (an unquoted yes in a
// schema's enum is true) decide its digest, which v3 would change.
func ParseManifests(b []byte) ([]kind.Manifest, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	j = bytes.TrimSpace(j)
	if len(j) == 0 || bytes.Equal(j, []byte("null")) {
		return nil, fmt.Errorf("parsing: empty manifest file")
	}
	var ms []kind.Manifest
	if j[0] == '[' {
		if err := decodeStrict(j, &ms); err != nil {
			return nil, err
		}
		return ms, nil
	}
	var m kind.Manifest
	if err := decodeStrict(j, &m); err != nil {
		return nil, err
	}
	return []kind.Manifest{m}, nil
}

func decodeStrict(j []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding manifest: %w", err)
	}
	return nil
}
