package mcp

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/front/apidial"
)

// APISettings say where bc-server's API is and which principal bc-mcp is:
// the CLI's settings, but bc-mcp reads them only from its own flags and
// BC_MCP_* variables, never from the CLI's config file or BC_TOKEN: a
// person's token must not become the agent's by accident.
type APISettings = apidial.Settings

// ErrNoToken is returned by Dial without a bearer token: bc-mcp always acts
// as its own agent principal, never anonymously.
var ErrNoToken = errors.New("no API token: bc-mcp needs the agent identity's bearer token (--token-file or BC_MCP_TOKEN_FILE)")

// ReadToken reads a bearer token from a file, dropping surrounding white
// space.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// Dial opens a client connection to the API with the settings' transport
// security; every call carries the bearer token. Unlike the CLI, bc-mcp has
// no default endpoint and no anonymous mode, so both are refused here.
func Dial(s APISettings) (*grpc.ClientConn, error) {
	if s.Token == "" {
		return nil, ErrNoToken
	}
	if target, _ := apidial.Target(s.Endpoint, s.Plaintext); target == "" {
		return nil, errors.New("no API endpoint (--endpoint or BC_MCP_ENDPOINT)")
	}
	return apidial.Dial(s)
}
