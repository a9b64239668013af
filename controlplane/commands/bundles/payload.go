package bundles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrReservedField is wrapped when a caller's logs.collect payload sets a
// field that only the control plane fills (uploadUrl, maxBytes,
// supportBundle, bundleKey); commands.run answers INVALID_INPUT.
var ErrReservedField = errors.New("payload sets a field the control plane fills")

// reservedFields are the payload fields MergePayload fills.
var reservedFields = []string{"uploadUrl", "maxBytes", "supportBundle", "bundleKey"}

// MergePayload returns the caller's logs.collect payload (a JSON object, or
// empty for {}) with the upload fields and the bundle key added, ready to be
// checked against logs.collect's schema (which requires uploadUrl and
// maxBytes) and stored. A caller cannot pick its own destination or cap: a
// payload that sets one of those fields is refused with ErrReservedField.
func MergePayload(payload json.RawMessage, bundleKey string, f UploadFields) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(payload)) > 0 {
		if err := json.Unmarshal(payload, &obj); err != nil {
			return nil, fmt.Errorf("logs.collect payload must be a JSON object: %w", err)
		}
		if obj == nil {
			obj = map[string]json.RawMessage{}
		}
	}
	for _, k := range reservedFields {
		if _, ok := obj[k]; ok {
			return nil, fmt.Errorf("%w: %s", ErrReservedField, k)
		}
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		obj[k] = b
	}
	set("uploadUrl", f.UploadURL)
	set("maxBytes", f.MaxBytes)
	set("supportBundle", f.SupportBundle)
	set("bundleKey", bundleKey)
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("marshalling logs.collect payload: %w", err)
	}
	return out, nil
}
