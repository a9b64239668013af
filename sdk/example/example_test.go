package example_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/example"
	"github.com/better-compute/commands/sdk/kind"
)

func TestManifests_Validate(t *testing.T) {
	for _, k := range example.Kinds() {
		require.NoError(t, k.Manifest.Validate(), k.Manifest.Kind)
	}
}

func TestEcho_CancelledBetweenSteps_ReportsTheStepsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := kind.Run(ctx, kind.HandlerFunc(example.Echo), kind.Request{
		Command: kind.Command{Kind: "example.echo", Payload: json.RawMessage(`{"message":"hi","sleepMs":500}`)},
		Progress: kind.ProgressFunc(func(percent int, _ string) {
			if percent >= 20 {
				cancel()
			}
		}),
		Logger: hclog.NewNullLogger(),
	})
	require.Equal(t, kind.StatusCancelled, res.Status)
	require.JSONEq(t, `{"message":"hi","steps":2}`, string(res.Data))
}

func TestEcho_WithoutWait(t *testing.T) {
	res := kind.Run(context.Background(), kind.HandlerFunc(example.Echo), kind.Request{
		Command:  kind.Command{Kind: "example.echo", Payload: json.RawMessage(`{"message":"hi"}`)},
		Progress: kind.ProgressFunc(func(int, string) { t.Fatal("no wait, no progress") }),
		Logger:   hclog.NewNullLogger(),
	})
	require.Equal(t, kind.StatusSucceeded, res.Status)
	require.JSONEq(t, `{"message":"hi","steps":0}`, string(res.Data))
}
