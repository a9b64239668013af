package e2e

// End to end with signing on (pki.commandSigning): the real bc-server
// registering the first-party kinds as bc-server does (kinds.FirstParty), a
// real `bcd run` joined with `bcd join` (so it holds the join answer's trust
// bundle), and the real first-party plugin binaries on go-nvml's mock
// dgxh200 GPUs and fake tools the test writes (nvidia-smi, dcgmi,
// journalctl), and a private dbus-daemon with a fake logind.
//
// The spec (commands.md, "Signatures and attested results"): "Once the
// daemon's trust bundle holds command-signing roots, it rejects every
// command without a valid signature with BAD_SIGNATURE, whatever its kind",
// and "For attested kinds the node signs its result with its node key".
//
// signed_harness_test.go builds these clusters, plugin_env_test.go writes
// the fake tools, and signed_reboot_test.go and signed_rejoin_test.go hold
// the reboot and the rejoin.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/server/servertest"
)

// "When the server is given pki.commandSigning ..., every command is signed
// by a 24-hour worker key that root certifies, and JoinResponse and Welcome
// carry the trust bundle"; "Once the daemon's trust bundle holds
// command-signing roots, it rejects every command without a valid signature
// ..., whatever its kind". Every first-party kind runs signed on a node
// that holds the bundle, and succeeds.
//
// The node runs in two configurations, restarted in between: bcd's
// pluginEnv goes to every plugin alike, and BCD_NVIDIA_SMI=mock (the nvml
// plugin's built-in mock, which bcd exec and the e2e tests use; the demo runs bin/tools/mocknvidiasmi instead) is, for gpu.reset and
// diag.dcgm, the path of the nvidia-smi to execute. So the NVML kinds run
// with BCD_NVIDIA_SMI=mock, the tool kinds with a fake nvidia-smi there.
func TestE2E_SignedEveryFirstPartyKindRuns(t *testing.T) {
	c := newSignedCluster(t)
	n := c.signedNode()
	env := baseEnv(t)
	env["BCD_NVIDIA_SMI"] = "mock"
	n.configure(env)
	n.start()
	c.nodeTrust()

	// inventory.refresh and diag.nvml: the mock dgxh200's eight H200s.
	inv := c.succeeded(c.run("inventory.refresh", map[string]any{}).GetId())
	gpus, _ := resultOf(inv)["gpus"].([]any)
	require.Len(t, gpus, 8, "the mock dgxh200's GPUs")
	diag := c.succeeded(c.run("diag.nvml", map[string]any{"expectedCount": 8}).GetId())
	require.Equal(t, "pass", resultOf(diag)["status"])

	// logs.collect: the control plane fills the upload URL of its dir blob
	// store; the plugin uploads the bundle there.
	logs := c.succeeded(c.run("logs.collect", map[string]any{"since": "1h"}).GetId())
	require.NotEmpty(t, logs.GetBundleKey())
	require.NotEmpty(t, resultOf(logs)["sha256"], "the bundle's digest: %v", resultOf(logs))

	// gpu.reset and diag.dcgm, not API-runnable: through the server's queue.
	n.stop()
	tools, smiCalls := toolEnv(t, env)
	n.configure(tools)
	n.start()
	reset := c.succeeded(c.enqueue("gpu.reset", map[string]any{"gpus": []string{fakeGPU1}}))
	rg := resultOf(reset)["gpus"].([]any)
	require.Len(t, rg, 1)
	require.Equal(t, "ok", rg[0].(map[string]any)["reset"])
	require.Equal(t, true, rg[0].(map[string]any)["healthy"])
	require.Contains(t, readLines(t, smiCalls), "--gpu-reset -i "+fakeGPU1, "the reset went to nvidia-smi")

	dcgm := c.succeeded(c.enqueue("diag.dcgm", map[string]any{"level": 3}))
	require.Equal(t, "pass", resultOf(dcgm)["overall"])
	require.NotEmpty(t, dcgm.GetNodeSig(), "diag.dcgm is attested: the node signed its result")
	c.nodeTrust()
}

// "the node signs its result with its node key ... over the command id,
// the state and the SHA-256 of the result"; `better-compute commands verify`
// "exits 3 for a forged, altered or unattested result". diag.dcgm's result
// verifies against the node CA; altered in the database it does not.
func TestE2E_SignedAttestedResultVerifiesAndTamperedFails(t *testing.T) {
	c := newSignedCluster(t)
	n := c.signedNode()
	env, _ := toolEnv(t, baseEnv(t))
	n.configure(env)
	n.start()
	id := c.succeeded(c.enqueue("diag.dcgm", map[string]any{"level": 3})).GetId()
	ca := filepath.Join(c.srv.CADir, "ca.pem")
	verify := func() (string, int) {
		out, errs, code := c.cli("commands", "verify", id, "nodeId="+servertest.NodeA1, "--node-ca", ca)
		return out + errs, code
	}
	out, code := verify()
	require.Equal(t, 0, code, out)
	require.Regexp(t, `SIGNED\s+true`, out)
	require.Contains(t, out, "verified: the node signed this result")

	ctx := context.Background()
	var raw []byte
	require.NoError(t, c.srv.Pool.QueryRow(ctx, `SELECT result_bytes FROM commands WHERE id = $1`, id).Scan(&raw))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "pass", doc["overall"])

	// The result shown altered, the node's bytes kept.
	_, err := c.srv.Pool.Exec(ctx, `UPDATE commands SET result = jsonb_set(result, '{overall}', '"fail"') WHERE id = $1`, id)
	require.NoError(t, err)
	out, code = verify()
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "NOT VERIFIED")
	require.Contains(t, out, "the result shown is not the result bytes the node sent")

	// A consistent forgery: the result, its bytes and their SHA-256 all
	// rewritten; only the node's signature stands against it.
	doc["overall"] = "fail"
	forged, err := json.Marshal(doc)
	require.NoError(t, err)
	sum := sha256.Sum256(forged)
	_, err = c.srv.Pool.Exec(ctx, `UPDATE commands SET result = $2::jsonb, result_bytes = $3, result_sha256 = $4 WHERE id = $1`,
		id, string(forged), forged, sum[:])
	require.NoError(t, err)
	out, code = verify()
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "NOT VERIFIED")
	require.Contains(t, out, "signature does not verify")
}
