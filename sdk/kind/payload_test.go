package kind_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/kind"
)

// DecodePayload reads an empty payload as {}, and a refusal keeps both the
// sentinel and the decoder's own error, so a handler can tell a syntax error
// from a type mismatch.
func TestDecodePayload(t *testing.T) {
	var v struct {
		N int `json:"n"`
	}
	require.NoError(t, kind.DecodePayload(nil, &v))
	require.Zero(t, v.N)

	err := kind.DecodePayload([]byte(`{"n":`), &v)
	require.ErrorIs(t, err, kind.ErrInvalidPayload)
	var syntax *json.SyntaxError
	require.ErrorAs(t, err, &syntax)

	err = kind.DecodePayload([]byte(`{"n":"x"}`), &v)
	require.ErrorIs(t, err, kind.ErrInvalidPayload)
	var typeErr *json.UnmarshalTypeError
	require.ErrorAs(t, err, &typeErr)
	require.Equal(t, "n", typeErr.Field)
}
