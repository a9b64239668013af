package pluginhost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testplugins"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/sdk/kind"
)

// fakeServices is bcd's side of the Host service as a test sees it.
type fakeServices struct {
	mu  sync.Mutex
	put json.RawMessage
}

func (s *fakeServices) Inventory(context.Context) (json.RawMessage, time.Time, error) {
	return json.RawMessage(`{"gpus":["GPU-1"]}`), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), nil
}

func (s *fakeServices) PutInventory(_ context.Context, inv json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put = append(json.RawMessage(nil), inv...)
	return nil
}

func (s *fakeServices) NodeSpec(context.Context) (int64, json.RawMessage, error) {
	return 7, json.RawMessage(`{"holds":[]}`), nil
}

func (s *fakeServices) Conditions(context.Context) ([]kind.Condition, error) {
	return []kind.Condition{{Type: "RebootRequired", Status: true, Reason: "huge-pages"}}, nil
}

func (s *fakeServices) Journal(context.Context, int) ([]json.RawMessage, error) { return nil, nil }

func TestHost_HostServiceReachesThePluginOverTheBroker(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	svc := &fakeServices{}
	h := mustStart(t, f, svc)
	res, err := execute(t, h, "test.host", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
	var got struct {
		Inventory   json.RawMessage
		CollectedAt time.Time
		Generation  int64
		Spec        json.RawMessage
		Conditions  []kind.Condition
	}
	require.NoError(t, json.Unmarshal(res.Data, &got))
	require.JSONEq(t, `{"gpus":["GPU-1"]}`, string(got.Inventory))
	require.True(t, got.CollectedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	require.EqualValues(t, 7, got.Generation)
	require.JSONEq(t, `{"holds":[]}`, string(got.Spec))
	require.Equal(t, "RebootRequired", got.Conditions[0].Type)
	svc.mu.Lock()
	require.JSONEq(t, `{"gpus":["put-by-plugin"]}`, string(svc.put))
	svc.mu.Unlock()

	// After a restart the new process gets its own broker connection.
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err = execute(t, h, "test.sleep", fmt.Sprintf(`{"steps":0,"pidFile":%q}`, pidFile))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(readPids(t, pidFile)[0], syscall.SIGKILL))
	testutil.WaitFor(t, 20*time.Second, "the plugin to restart", func() bool { return strings.Contains(f.logs.String(), "plugin restarted") })
	res, err = execute(t, h, "test.host", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusSucceeded, res.Status, res.Message)
}

func TestHost_HostServiceAbsent_PluginGetsAnError(t *testing.T) {
	f := newFixture(t)
	install(t, f.dir, testplugins.KindTest, "bc-kind-test")
	h := mustStart(t, f, nil)
	res, err := execute(t, h, "test.host", `{}`)
	require.NoError(t, err)
	require.Equal(t, kind.StatusFailed, res.Status)
	require.Contains(t, res.Message, "no host service")
}
