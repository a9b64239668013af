package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bcd run with a pluginDir that is not there exits 2 with an error naming
// it, instead of running a daemon without a single kind.
func TestRun_MissingPluginDirExitsWithAClearError(t *testing.T) {
	e := newEnv(t)
	notThere := filepath.Join(t.TempDir(), "plugins")
	aFile := filepath.Join(t.TempDir(), "plugins-file")
	require.NoError(t, os.WriteFile(aFile, nil, 0o600))
	for _, dir := range []string{notThere, aFile} {
		cmd := exec.Command(e.bin, "run", "--config", e.config, "--plugins", dir, "--state-dir", e.state,
			"--node-id", "node_e2e", "--boot-id-file", e.bootID)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, stderr.String())
			require.Equal(t, 2, ee.ExitCode(), stderr.String())
			require.Contains(t, stderr.String(), "pluginDir "+dir)
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("bcd run kept running with pluginDir %s:\n%s", dir, stderr.String())
		}
	}
}
