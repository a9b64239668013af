package mcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// APISettings say where bc-server's API is and which principal bc-mcp is.
// They mirror the CLI's settings, but bc-mcp reads them only from its own
// flags and BC_MCP_* variables, never from the CLI's config file or BC_TOKEN:
// a person's token must not become the agent's by accident.
type APISettings struct {
	// Endpoint is host:port; an http:// prefix means plaintext, https:// TLS.
	Endpoint string
	// Token is the agent identity's bearer token.
	Token string
	// CACert verifies the server (PEM file); empty uses the system roots.
	CACert string
	// Cert and Key are a client certificate for mTLS (PEM files).
	Cert, Key string
	// Plaintext turns TLS off (loopback and tests only).
	Plaintext bool
}

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
// security; every call carries the bearer token.
func Dial(s APISettings) (*grpc.ClientConn, error) {
	if s.Token == "" {
		return nil, ErrNoToken
	}
	target, plaintext := s.Endpoint, s.Plaintext
	switch {
	case strings.HasPrefix(target, "http://"):
		target, plaintext = strings.TrimPrefix(target, "http://"), true
	case strings.HasPrefix(target, "https://"):
		target, plaintext = strings.TrimPrefix(target, "https://"), false
	}
	if target == "" {
		return nil, errors.New("no API endpoint (--endpoint or BC_MCP_ENDPOINT)")
	}
	creds, err := transportCreds(s, plaintext)
	if err != nil {
		return nil, err
	}
	// The token goes in metadata by interceptor rather than as
	// PerRPCCredentials, which grpc-go refuses over plaintext; loopback
	// development and the tests need it there (as the CLI does).
	withToken := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.Token)
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return invoker(withToken(ctx), method, req, reply, cc, o...)
		}))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", s.Endpoint, err)
	}
	return conn, nil
}

func transportCreds(s APISettings, plaintext bool) (credentials.TransportCredentials, error) {
	if plaintext {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.CACert != "" {
		pem, err := os.ReadFile(s.CACert)
		if err != nil {
			return nil, fmt.Errorf("reading CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate %s holds no PEM certificate", s.CACert)
		}
		cfg.RootCAs = pool
	}
	if s.Cert != "" || s.Key != "" {
		pair, err := tls.LoadX509KeyPair(s.Cert, s.Key)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}
