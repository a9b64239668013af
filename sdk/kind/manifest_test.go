package kind

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestManifest_Validate_NamesEachProblem(t *testing.T) {
	for _, tc := range []struct {
		Name   string
		Mutate func(*Manifest)
		Want   string
	}{
		{"kind not dotted", func(m *Manifest) { m.Kind = "nvml" }, `kind "nvml"`},
		{"kind upper case", func(m *Manifest) { m.Kind = "Diag.NVML" }, `kind "Diag.NVML"`},
		{"unknown lane", func(m *Manifest) { m.Lane = "fast" }, `lane "fast": must be one of control, provision, bulk`},
		{"zero timeout", func(m *Manifest) { m.Timeout = 0 }, "timeout 0s"},
		{"timeout past a day", func(m *Manifest) { m.Timeout = Duration(25 * time.Hour) }, "at most 24h0m0s"},
		{"no roles", func(m *Manifest) { m.Roles = nil }, "roles: must name at least one"},
		{"bad role", func(m *Manifest) { m.Roles = []string{"Node"} }, `role "Node"`},
		{"bad version", func(m *Manifest) { m.Version = "one" }, `version "one"`},
		{"self-terminating and retry-safe", func(m *Manifest) { m.Flags = Flags{SelfTerminating: true, RetrySafe: true} }, "cannot be retry-safe"},
		{"schema not JSON", func(m *Manifest) { m.PayloadSchema = json.RawMessage(`{`) }, "payloadSchema"},
		{"schema not a schema", func(m *Manifest) { m.PayloadSchema = json.RawMessage(`{"type":"sandwich"}`) }, "payloadSchema"},
	} {
		t.Run(tc.Name, func(t *testing.T) {
			m := testManifest("diag.nvml")
			require.NoError(t, m.Validate())
			tc.Mutate(&m)
			require.ErrorContains(t, m.Validate(), tc.Want)
		})
	}
}

func TestManifest_Digest_IgnoresSchemaWhitespace_ButNotContent(t *testing.T) {
	a := testManifest("diag.nvml")
	b := testManifest("diag.nvml")
	b.PayloadSchema = json.RawMessage("{\n  \"type\": \"object\",\n  \"properties\": {\"n\": {\"type\": \"integer\"}},\n  \"additionalProperties\": false\n}")
	require.Equal(t, a.Digest(), b.Digest())
	b.Version = "1.0.1"
	require.NotEqual(t, a.Digest(), b.Digest())
}

func TestManifest_ProtoRoundTrip(t *testing.T) {
	m := testManifest("diag.nvml")
	m.Flags = Flags{RetrySafe: true, Attested: true}
	m.APIRunnable = true
	m.Description = "checks"
	got := manifestFromProto(manifestToProto(m))
	require.Equal(t, m.Digest(), got.Digest())
	require.Equal(t, m, got)
}

func TestManifest_JSONRoundTrip_DurationAsString(t *testing.T) {
	m := testManifest("diag.nvml")
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.Contains(t, string(b), `"timeout":"1m0s"`)
	var got Manifest
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, m.Digest(), got.Digest())
	require.ErrorContains(t, json.Unmarshal([]byte(`{"timeout":90}`), &got), "duration must be a string")
}

func TestValidator_NamesTheFailingField(t *testing.T) {
	v, err := NewValidator(testManifest("t.kind"))
	require.NoError(t, err)
	require.NoError(t, v.Validate(nil), "an empty payload reads as {}")
	require.NoError(t, v.Validate([]byte(`{"n":1}`)))
	err = v.Validate([]byte(`{"n":"x"}`))
	require.ErrorIs(t, err, ErrInvalidPayload)
	var pe *PayloadError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "/n", pe.Field)
	err = v.Validate([]byte(`{"m":1}`))
	require.ErrorContains(t, err, "payload field")
	require.ErrorContains(t, v.Validate([]byte(`{`)), "not valid JSON")
}

func TestResultOf(t *testing.T) {
	ctx := t.Context()
	require.Equal(t, Result{Status: StatusSucceeded, Data: json.RawMessage(`{"a":1}`)}, ResultOf(ctx, map[string]int{"a": 1}, nil))
	require.Equal(t, Result{Status: StatusFailed, Reason: "gpu-busy", Message: "GPU-1 has a live assignment", Data: json.RawMessage(`{"gpu":"GPU-1"}`)},
		ResultOf(ctx, nil, &Failure{Reason: "gpu-busy", Message: "GPU-1 has a live assignment", Result: map[string]string{"gpu": "GPU-1"}}))
	r := ResultOf(ctx, nil, Fail("reset-failed", "GPU %d", 3))
	require.Equal(t, "reset-failed", r.Reason)
	require.Equal(t, "GPU 3", r.Message)
	r = ResultOf(ctx, make(chan int), nil)
	require.Equal(t, ReasonBadResult, r.Reason)
}

// "The daemon stops between actions and reports the real outcome": a
// failure that comes after a cancel (the tool it ran was killed) is the
// cancel's outcome, with what was done before it stopped.
func TestResultOf_FailureAfterCancelIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := ResultOf(ctx, nil, &Failure{Reason: "reset-failed", Message: "nvidia-smi was killed", Result: map[string]int{"done": 1}})
	require.Equal(t, StatusCancelled, r.Status)
	require.Equal(t, ReasonCancelled, r.Reason)
	require.Contains(t, r.Message, "nvidia-smi was killed")
	require.JSONEq(t, `{"done":1}`, string(r.Data))
}
