package secrets

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/sealed"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// control plays the control plane's side: it seals each asked ref's value
// to the request's one-time key, as controlplane/trust/secrets does.
func control(t *testing.T, x *Exchanger, values map[string]string, refuse string) {
	x.SetSender(func(m *agentv1.NodeMessage) bool {
		req := m.GetSecretRequest()
		require.NotNil(t, req)
		resp := &agentv1.SecretResponse{RequestId: req.GetRequestId(), CommandId: req.GetCommandId()}
		if refuse != "" {
			resp.Error, resp.Message = refuse, "refused by the test"
		} else {
			for _, r := range req.GetRefs() {
				ct, err := sealed.Seal(req.GetKemId(), req.GetPublicKey(), "node_a", req.GetCommandId(), r, []byte(values[r]))
				require.NoError(t, err)
				resp.Secrets = append(resp.Secrets, &agentv1.SealedSecret{Ref: r, Sealed: ct})
			}
		}
		go x.Deliver(resp)
		return true
	})
}

// "bcd makes a one-time key pair per command, sends the public key with an
// exchange request over its session, receives the value sealed to it".
func TestFetch_OpensTheValuesSealedToItsOneTimeKey(t *testing.T) {
	x := New("node_a", nil)
	control(t, x, map[string]string{"bmc-password": "pw1", "bmc-user": "admin"}, "")
	got, err := x.Fetch(context.Background(), "cmd_1", []string{"bmc-password", "bmc-user"})
	require.NoError(t, err)
	require.Equal(t, map[string][]byte{"bmc-password": []byte("pw1"), "bmc-user": []byte("admin")}, got)
}

func TestFetch_ARefusalIsTheCommandsReason(t *testing.T) {
	for code, want := range map[string]string{"secret-denied": ReasonDenied, "secret-not-found": ReasonNotFound, "secrets-unavailable": ReasonUnavailable, "odd": ReasonUnavailable} {
		x := New("node_a", nil)
		control(t, x, nil, code)
		_, err := x.Fetch(context.Background(), "cmd_1", []string{"bmc-password"})
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, want, e.SecretReason(), code)
		require.Equal(t, "refused by the test", e.Error())
	}
}

// A value sealed for another node (or moved by a gateway to another
// command) does not open: the fetch fails, nothing is handed on.
func TestFetch_AValueSealedForAnotherNodeIsRefused(t *testing.T) {
	x := New("node_b", nil)
	control(t, x, map[string]string{"r": "v"}, "")
	_, err := x.Fetch(context.Background(), "cmd_1", []string{"r"})
	require.ErrorContains(t, err, `opening secret "r" of cmd_1`)
}

func TestFetch_WithoutASessionItGivesUpAtItsTimeout(t *testing.T) {
	x := New("node_a", nil)
	x.Timeout, x.Resend = 50*time.Millisecond, 10*time.Millisecond
	x.SetSender(func(*agentv1.NodeMessage) bool { return false })
	_, err := x.Fetch(context.Background(), "cmd_1", []string{"r"})
	require.ErrorContains(t, err, "no session to the control plane")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = x.Fetch(ctx, "cmd_1", []string{"r"})
	require.ErrorIs(t, err, context.Canceled)
}
