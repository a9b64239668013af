package daemon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/kind"
)

func TestState_PersistsAndSpecOnlyMovesForward(t *testing.T) {
	dir := t.TempDir()
	s, err := NewState(dir, nil)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.PutInventory(ctx, []byte(`{"gpus":[1]}`)))
	require.Error(t, s.PutInventory(ctx, []byte(`{`)))
	changed := s.SpecChanged()
	applied, err := s.ApplySpec(3, []byte(`{"holds":[]}`))
	require.NoError(t, err)
	require.True(t, applied)
	<-changed
	applied, err = s.ApplySpec(2, []byte(`{"old":true}`))
	require.NoError(t, err)
	require.False(t, applied, "an older generation changes nothing, and says so")
	applied, err = s.ApplySpec(3, []byte(`{"holds":[]}`))
	require.NoError(t, err)
	require.False(t, applied, "nor does the applied one again")
	require.NoError(t, s.SetCondition(kind.Condition{Type: "RebootRequired", Status: true, Reason: "hugepages"}))

	s, err = NewState(dir, nil)
	require.NoError(t, err)
	inv, at, err := s.Inventory(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"gpus":[1]}`, string(inv))
	require.False(t, at.IsZero())
	gen, spec, err := s.NodeSpec(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), gen)
	require.JSONEq(t, `{"holds":[]}`, string(spec))
	conds, err := s.Conditions(ctx)
	require.NoError(t, err)
	require.Len(t, conds, 1)
	require.Equal(t, "RebootRequired", conds[0].Type)
}

func TestState_ServedToPlugins(t *testing.T) {
	// The plugins ask bcd for what only bcd knows, over go-plugin's broker.
	n := start(t, "", nil)
	_, err := n.state.ApplySpec(4, []byte(`{"holds":[]}`))
	require.NoError(t, err)
	ch, err := n.d.Submit(context.Background(), cmd("cmd_journal_host", "example.noop", map[string]any{}))
	require.NoError(t, err)
	collect(t, ch)
	recs, err := n.state.Journal(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Contains(t, string(recs[0]), "cmd_journal_host")
}
