package pluginhost_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/wire"
)

// "The daemon stops between actions and reports the real outcome, so a side
// effect that already happened is never hidden."
func TestHost_Cancel_StopsTheKind_AndReturnsThePluginsOwnOutcome(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	res, err := h.Execute(ctx, kind.Command{ID: "cmd_cancel", Kind: "test.sleep", Payload: json.RawMessage(`{"steps":100000,"stepMs":10}`)},
		func(percent int, message string) {
			if message == "step 2" {
				cancel()
			}
		})
	require.NoError(t, err, "the result is the plugin's own")
	require.Equal(t, kind.StatusCancelled, res.Status)
	var data struct{ Steps int }
	require.NoError(t, json.Unmarshal(res.Data, &data))
	require.GreaterOrEqual(t, data.Steps, 2, "the steps already done are reported")
	require.Less(t, data.Steps, 100000)
	require.Less(t, time.Since(start), 30*time.Second)

	// The plugin keeps serving.
	res, err = execute(t, h, "test.noop", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status)
}

func TestHost_Cancel_PluginThatIgnoresIt_GetsCancelledAfterTheGrace(t *testing.T) {
	f := newFixture(t)
	f.cfg.CancelGrace = 200 * time.Millisecond
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := h.Execute(ctx, kind.Command{ID: "cmd_stubborn", Kind: "test.sleep", Payload: json.RawMessage(`{"steps":1000,"stepMs":20,"ignoreCancel":true}`)},
		func(int, string) { cancel() })
	require.ErrorIs(t, err, wire.ErrNoOutcome)
	require.Equal(t, kind.StatusCancelled, res.Status)
	require.Equal(t, kind.ReasonCancelled, res.Reason)
}

func TestHost_Deadline_PluginReportsTimeout(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	res, err := h.Execute(context.Background(), kind.Command{ID: "cmd_deadline", Kind: "test.sleep", Deadline: time.Now().Add(300 * time.Millisecond), Payload: json.RawMessage(`{"steps":100000,"stepMs":10}`)}, nil)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Equal(t, "timeout", res.Reason)
	require.NotEmpty(t, res.Data, "what ran is still reported")
}
