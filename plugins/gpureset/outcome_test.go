package gpureset_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/gpureset"
	"github.com/better-compute/commands/plugins/gpureset/manifest"
	"github.com/better-compute/commands/plugins/internal/gpu/gputest"
	"github.com/better-compute/commands/sdk/kind"
)

// "It resets the others with nvidia-smi --gpu-reset, reports per GPU whether
// the reset worked and whether a fresh inventory shows it healthy, and clears
// the XID conditions of a GPU the reset left healthy."
func TestResetsRecordingAndRestoringPersistence(t *testing.T) {
	e := newEnv(t)
	e.smi.On(qPersist+gpuB, gpuB+", Disabled\n", 0)
	r, doc := e.run(t, gpuA, gpuB)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)

	require.Equal(t, []string{
		qGPUs,
		qApps,
		qPersist + gpuA,
		"-pm 0 -i " + gpuA,
		"--gpu-reset -i " + gpuA,
		"-pm 1 -i " + gpuA,
		qHealth + gpuA,
		qRemap,
		qPersist + gpuB,
		// persistence was off: nothing to turn off or restore
		"--gpu-reset -i " + gpuB,
		qHealth + gpuB,
		qRemap,
	}, e.smi.Calls())

	require.Len(t, doc.GPUs, 2)
	a, b := doc.GPUs[0], doc.GPUs[1]
	require.Equal(t, gpuA, a.UUID)
	require.Equal(t, "enabled", a.PersistenceMode)
	require.True(t, a.PersistenceRestored)
	require.Equal(t, gpureset.ResetOK, a.Reset)
	require.True(t, a.Healthy)
	require.True(t, a.XIDsCleared)
	require.Equal(t, "disabled", b.PersistenceMode)
	require.True(t, b.Healthy)
	require.Equal(t, []string{gpuA + "@00000000:3B:00.0", gpuB + "@00000000:86:00.0"}, e.xids.cleared)
}

// nvidia-smi refuses a reset while persistence mode or another client holds
// the GPU: "In use by another client", exit 255.
func TestResetInUseByAnotherClient(t *testing.T) {
	e := newEnv(t)
	e.smi.OnErr("--gpu-reset -i "+gpuA, "", "GPU 00000000:3B:00.0 is currently in use by another process.\n\n1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application, graphics application such as an X server, or a monitoring application such as another instance of nvidia-smi). Please first kill all processes using this device and all compute applications running in the system.\nIn use by another client\n", 255)
	r, doc := e.run(t, gpuA)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "reset-failed", r.Reason)
	require.Contains(t, r.Message, "exit 255")
	require.Len(t, doc.GPUs, 1)
	g := doc.GPUs[0]
	require.Equal(t, gpureset.ResetFailed, g.Reset)
	require.Contains(t, g.Error, "In use by another client")
	require.False(t, g.Healthy)
	require.False(t, g.XIDsCleared)
	// Persistence mode is put back even though the reset failed.
	require.True(t, g.PersistenceRestored)
	require.Contains(t, e.smi.Calls(), "-pm 1 -i "+gpuA)
	require.Empty(t, e.xids.cleared)
}

// A hung GPU firmware hangs nvidia-smi: the reset is killed at its timeout,
// with every process it started.
func TestResetHangIsKilledByTheTimeout(t *testing.T) {
	e := newEnv(t)
	e.smi.Hang("--gpu-reset -i " + gpuA)
	e.cfg.ResetTimeout = 500 * time.Millisecond
	start := time.Now()
	r, doc := e.run(t, gpuA)
	require.Less(t, time.Since(start), 30*time.Second)
	require.Equal(t, "reset-failed", r.Reason)
	require.Len(t, doc.GPUs, 1)
	require.Contains(t, doc.GPUs[0].Error, "timed out and was killed after 500ms")
	require.True(t, doc.GPUs[0].PersistenceRestored)

	child := e.smi.HangChild()
	require.NotZero(t, child, "the hang started its child")
	testutil.WaitFor(t, 10*time.Second, "the hung reset's child to be killed", func() bool { return gputest.Gone(child) })
}

// "NVIDIA says the reset is not guaranteed": a reset that leaves the GPU
// unhealthy is reported, and its XID conditions stay.
func TestResetLeavesGPUUnhealthy(t *testing.T) {
	e := newEnv(t)
	e.smi.On(qRemap, gpuA+", 0, 1, Yes, No\n"+gpuB+", 0, 0, No, No\n", 0)
	r, doc := e.run(t, gpuA, gpuB)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, "gpu-unhealthy", r.Reason)
	require.Contains(t, r.Message, gpuA+": a row remap is still pending")
	a := doc.GPUs[0]
	require.Equal(t, gpureset.ResetOK, a.Reset)
	require.False(t, a.Healthy)
	require.Equal(t, []string{"a row remap is still pending"}, a.Problems)
	require.False(t, a.XIDsCleared)
	// The healthy one is still cleared.
	require.Equal(t, []string{gpuB + "@00000000:86:00.0"}, e.xids.cleared)
}

// A driver that does not know the remapped_rows.* fields of --query-gpu
// refuses a query that names one as a whole: the health after the reset
// reads the remapped rows as the inventory does, and a driver that cannot
// say leaves a note, not an unhealthy GPU.
func TestResetHealthOnADriverWithoutRemappedRowsFields(t *testing.T) {
	e := newEnv(t)
	e.smi.On(qHealthWithRemap+gpuA, oldDriver, 2)
	e.smi.On(qRemap, oldDriver, 2)
	r, doc := e.run(t, gpuA)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	g := doc.GPUs[0]
	require.True(t, g.Healthy, g.Problems)
	require.True(t, g.XIDsCleared)
	require.Contains(t, g.Notes, `row remapping not checked: nvidia-smi failed (exit 2): Field "remapped_rows.pending" is not a valid field to query.`)
	require.NotContains(t, e.smi.Calls(), qHealthWithRemap+gpuA)
}

func TestResetGPUFallenOffTheBus(t *testing.T) {
	e := newEnv(t)
	e.smi.OnErr(qHealth+gpuA, "", "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", 15)
	r, doc := e.run(t, gpuA)
	require.Equal(t, "gpu-unhealthy", r.Reason)
	require.False(t, doc.GPUs[0].Healthy)
	require.Contains(t, doc.GPUs[0].Problems[0], "fallen off the bus")
	require.Empty(t, e.xids.cleared)
}

func TestNvidiaSmiDriverNotLoaded(t *testing.T) {
	e := newEnv(t)
	e.smi.OnErr(qGPUs, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n", 9)
	r, _ := e.run(t, gpuA)
	require.Equal(t, "nvidia-smi-failed", r.Reason)
	require.Contains(t, r.Message, "exit 9 (the NVIDIA driver is not loaded)")
}

// "The daemon stops between actions and reports the real outcome, so a side
// effect that already happened is never hidden."
func TestCancelStopsBetweenGPUsAndRestoresPersistence(t *testing.T) {
	e := newEnv(t)
	e.smi.Hang("--gpu-reset -i " + gpuA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan kind.Result, 1)
	go func() {
		done <- kind.Run(ctx, gpureset.Handler(e.cfg), kind.Request{
			Command: kind.Command{ID: "cmd_1", Kind: manifest.KindName, Payload: json.RawMessage(`{"gpus":["` + gpuA + `","` + gpuB + `"]}`)},
			Host:    e.host,
			Logger:  hclog.NewNullLogger(),
		})
	}()
	// Cancel once the reset of the first GPU is under way.
	testutil.WaitFor(t, 20*time.Second, "the first GPU's reset to start", func() bool { return e.smi.HangChild() != 0 })
	cancel()
	var r kind.Result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled reset did not return")
	}
	require.Equal(t, kind.StatusCancelled, r.Status, r.Message)
	var doc gpureset.Result
	require.NoError(t, json.Unmarshal(r.Data, &doc))
	require.Len(t, doc.GPUs, 2)
	require.Equal(t, gpureset.ResetFailed, doc.GPUs[0].Reset)
	require.True(t, doc.GPUs[0].PersistenceRestored, "persistence mode is restored after a cancel")
	require.Equal(t, gpureset.ResetNotAttempted, doc.GPUs[1].Reset)
	require.NotContains(t, e.smi.Calls(), "--gpu-reset -i "+gpuB)
	require.Contains(t, e.smi.Calls(), "-pm 1 -i "+gpuA)
}
