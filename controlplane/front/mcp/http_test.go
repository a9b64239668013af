package mcp_test

import (
	"bufio"
	"context"
	"errors"
	"github.com/better-compute/commands/internal/testutil"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/front/mcp"
	"github.com/better-compute/commands/controlplane/server/servertest"
)

// startHTTP runs bc-mcp --http on a loopback port and returns its URL once
// it says it listens.
func startHTTP(t *testing.T, endpoint string, extra ...string) (string, *syncBuffer) {
	t.Helper()
	tokens := writeFile(t, "mcp-tokens.txt", "# the MCP clients\nalice alice-secret\nbob sha256:"+
		"81b637d8fcd2c6da6359e6963113a1170de795e4b725b84d1e0b4cfd9ec58ce9\n") // sha256("bob")
	cmd, stderr := mcpCommand(t, endpoint, append([]string{"--http", "127.0.0.1:0", "--http-tokens", tokens}, extra...)...)
	cmd.Stderr = nil
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			stderr.Write([]byte(line + "\n"))
			if a, found := strings.CutPrefix(line, "bc-mcp: listening on "); found {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a + "/", stderr
	case <-time.After(30 * time.Second):
		t.Fatalf("bc-mcp never listened; stderr:\n%s", stderr.String())
		return "", nil
	}
}

func post(t *testing.T, url, token string, body io.Reader, length int64) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	require.NoError(t, err)
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

// bearerTransport adds a bearer token to each request of the SDK client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// The HTTP transport refuses a missing or unknown bearer token (401 with a
// challenge) and a body over the limit (413, declared or streamed, before
// authentication), and serves an SDK client with a listed token against a
// real bc-server, auditing the token's name.
func TestHTTPTransport(t *testing.T) {
	r := startServer(t)
	url, stderr := startHTTP(t, r.GRPC, "--http-max-body", "4096")

	resp := post(t, url, "", strings.NewReader(listTools), int64(len(listTools)))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, `Bearer realm="bc-mcp"`, resp.Header.Get("WWW-Authenticate"))
	resp = post(t, url, "not-a-token", strings.NewReader(listTools), int64(len(listTools)))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp = post(t, url, TokAgent, strings.NewReader(listTools), int64(len(listTools)))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the API token is not an MCP client token")

	big := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"` + strings.Repeat("x", 8192) + `"}}`
	resp = post(t, url, "alice-secret", strings.NewReader(big), int64(len(big)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	resp = post(t, url, "", strings.NewReader(big), int64(len(big)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "the limit holds before authentication")
	resp = post(t, url, "alice-secret", io.MultiReader(strings.NewReader(big)), -1) // chunked: no length declared
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	resp = post(t, url, "bob", strings.NewReader(listTools), int64(len(listTools)))
	require.Equal(t, http.StatusOK, resp.StatusCode, "a token listed by its digest")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := gomcp.NewClient(&gomcp.Implementation{Name: "bc-mcp-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &gomcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport{token: "alice-secret"}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	tools, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 11, "the six tools of nodes, commands and batches, and the five of fleet runs")
	node := ok(t, cs, mcp.ToolGetNode, map[string]any{"nodeId": servertest.NodeA1})["node"].(map[string]any)
	require.Equal(t, servertest.NodeA1, node["id"])
	// The audit line is written as the call returns: wait for it.
	testutil.WaitFor(t, 10*time.Second, "the audit line naming the principal", func() bool { return strings.Contains(stderr.String(), "principal=alice") })
}

// bc-mcp refuses to serve HTTP beyond loopback unless asked, and then only
// with TLS.
func TestHTTPRefusesNonLoopback(t *testing.T) {
	tokens := writeFile(t, "mcp-tokens.txt", "alice alice-secret\n")
	for _, args := range [][]string{
		{"--http", "0.0.0.0:0", "--http-tokens", tokens},
		{"--http", "0.0.0.0:0", "--http-tokens", tokens, "--http-allow-remote"},
	} {
		cmd, stderr := mcpCommand(t, "127.0.0.1:1", args...)
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %v", args, err)
		require.Equal(t, 2, ee.ExitCode(), args)
		require.Contains(t, stderr.String(), "refusing a non-loopback address", args)
	}
}
