package kind

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzValidator_Validate: any bytes are either accepted or refused with a
// *PayloadError that wraps ErrInvalidPayload; never a panic, never another error.
func FuzzValidator_Validate(f *testing.F) {
	m := testManifest("t.kind")
	m.PayloadSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0},"s":{"type":"array","items":{"enum":["gpus","disks"]}}},"required":["n"],"additionalProperties":false}`)
	v, err := NewValidator(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"n":1,"s":["gpus"]}`))
	f.Add([]byte(`{"n":-1}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		err := v.Validate(payload)
		if err == nil {
			return
		}
		var pe *PayloadError
		if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPayload) {
			t.Fatalf("refusal is not a PayloadError: %T %v", err, err)
		}
		if pe.Problem == "" {
			t.Fatal("refusal says nothing")
		}
	})
}

// FuzzDuration_UnmarshalJSON: what reads back writes the same value again.
func FuzzDuration_UnmarshalJSON(f *testing.F) {
	f.Add([]byte(`"90s"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		if err := d.UnmarshalJSON(b); err != nil {
			return
		}
		out, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := back.UnmarshalJSON(out); err != nil || back != d {
			t.Fatalf("%s -> %s -> %v (%v)", b, out, back, err)
		}
	})
}

// FuzzManifest_JSON: a manifest file (third-party kinds reach the registry
// as files) either fails to parse or validate, or survives the wire intact.
func FuzzManifest_JSON(f *testing.F) {
	f.Add([]byte(`{"kind":"diag.nvml","lane":"control","timeout":"5m","roles":["node"],"flags":{"retrySafe":true},"version":"1.0.0"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			return
		}
		if _, err := NewValidator(m); err != nil {
			t.Fatalf("valid manifest whose schema does not compile: %v", err)
		}
		got := manifestFromProto(manifestToProto(m))
		if got.Digest() != m.Digest() {
			t.Fatalf("digest changed over the wire: %+v -> %+v", m, got)
		}
	})
}
