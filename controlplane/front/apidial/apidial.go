// Package apidial opens a client connection to bc-server's API the one way
// the CLI and bc-mcp both need: an endpoint that may say its own transport
// (http:// or https://), TLS verified against a CA file or the system roots,
// an optional client certificate for mTLS, and a bearer token on every call.
// Each caller keeps its own flags, environment and config file; only the
// connection is built here, so the two cannot drift apart.
package apidial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Settings say where the API is, how to reach it and who the caller is.
type Settings struct {
	// Endpoint is host:port; an http:// prefix means plaintext, https:// TLS,
	// whatever Plaintext says.
	Endpoint string
	// Token is the bearer token; empty sends none.
	Token string
	// CACert verifies the server (PEM file); empty uses the system roots.
	CACert string
	// Cert and Key are a client certificate for mTLS (PEM files).
	Cert, Key string
	// Plaintext turns TLS off (loopback and tests only).
	Plaintext bool
}

// Target splits an endpoint into the address to dial and whether to dial it
// in plaintext: an http:// or https:// prefix is dropped and decides, and
// without one plaintext stands.
func Target(endpoint string, plaintext bool) (string, bool) {
	switch {
	case strings.HasPrefix(endpoint, "http://"):
		return strings.TrimPrefix(endpoint, "http://"), true
	case strings.HasPrefix(endpoint, "https://"):
		return strings.TrimPrefix(endpoint, "https://"), false
	}
	return endpoint, plaintext
}

// TLSConfig is the client's TLS configuration: TLS 1.2 or later, the
// server verified against the certificates in caCert (the system roots when
// empty), and cert and key presented as the client's certificate when
// either is given (so one without the other is an error, not silently no
// mTLS).
func TLSConfig(caCert, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caCert != "" {
		pem, err := os.ReadFile(caCert)
		if err != nil {
			return nil, fmt.Errorf("reading CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate %s holds no PEM certificate", caCert)
		}
		cfg.RootCAs = pool
	}
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Dial opens a client connection with the settings' transport security;
// every call, unary or streaming, carries the bearer token when there is
// one. Like grpc.NewClient it does not connect: a server that cannot be
// reached or verified fails the first call.
func Dial(s Settings) (*grpc.ClientConn, error) {
	target, plaintext := Target(s.Endpoint, s.Plaintext)
	var creds credentials.TransportCredentials
	if plaintext {
		creds = insecure.NewCredentials()
	} else {
		cfg, err := TLSConfig(s.CACert, s.Cert, s.Key)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if s.Token != "" {
		opts = append(opts, bearer(s.Token)...)
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", s.Endpoint, err)
	}
	return conn, nil
}

// bearer puts the token in each call's metadata by interceptor rather than
// as PerRPCCredentials, which grpc-go refuses over plaintext; loopback
// development and the tests need it there.
func bearer(token string) []grpc.DialOption {
	withToken := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return []grpc.DialOption{
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return invoker(withToken(ctx), method, req, reply, cc, o...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(withToken(ctx), desc, cc, method, o...)
		}),
	}
}
