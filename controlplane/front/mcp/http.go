package mcp

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxBodyBytes bounds an HTTP request body: tool arguments are small.
const DefaultMaxBodyBytes = 1 << 20

// HTTPConfig is the streamable HTTP transport's configuration.
type HTTPConfig struct {
	// Addr is host:port; ":PORT" listens on 127.0.0.1 only.
	Addr string
	// Tokens are the bearer tokens MCP clients present; the transport's
	// own list, unrelated to the API token bc-mcp itself holds.
	Tokens []Token
	// MaxBodyBytes bounds a request body (DefaultMaxBodyBytes when zero).
	MaxBodyBytes int64
	// AllowRemote permits a non-loopback address, which also needs TLS.
	AllowRemote bool
	// TLSCert and TLSKey serve HTTPS (PEM files).
	TLSCert, TLSKey string
}

// Token is one accepted bearer token: a name for the audit log and the
// SHA-256 of the token.
type Token struct {
	Name   string
	SHA256 [sha256.Size]byte
}

// ErrRemoteRefused is returned for a non-loopback address without
// AllowRemote and TLS.
var ErrRemoteRefused = errors.New("refusing a non-loopback address")

// PlainToken makes a Token from a token's text.
func PlainToken(name, token string) Token {
	return Token{Name: name, SHA256: sha256.Sum256([]byte(token))}
}

// LoadTokens reads the transport's tokens: one a line, "NAME TOKEN" or
// "NAME sha256:HEX" (the digest of the token, so the file holds no secret);
// blank lines and lines starting with # are skipped.
func LoadTokens(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading HTTP tokens: %w", err)
	}
	defer f.Close()
	var out []Token
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: expected NAME TOKEN or NAME sha256:HEX", path, line)
		}
		hexSum, isDigest := strings.CutPrefix(fields[1], "sha256:")
		if !isDigest {
			out = append(out, PlainToken(fields[0], fields[1]))
			continue
		}
		b, err := hex.DecodeString(hexSum)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%s:%d: %q is not a hex SHA-256 digest", path, line, hexSum)
		}
		t := Token{Name: fields[0]}
		copy(t.SHA256[:], b)
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no token", path)
	}
	return out, nil
}

// HTTPHandler serves the streamable HTTP transport (stateless, JSON
// answers) behind, in this order, a request body limit (before anything
// reads the body, and before authentication, so an unauthenticated client
// cannot make the server buffer much) and bearer authentication against
// tokens. The SDK's DNS-rebinding protection stays on.
func (s *Server) HTTPHandler(tokens []Token, maxBody int64) http.Handler {
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	mcpHandler := gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return s.mcp },
		&gomcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: maxBody})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		name := ""
		for _, t := range tokens {
			// Compare against every token, so timing says nothing of which
			// one (or whether any) matched.
			if subtle.ConstantTimeCompare(sum[:], t.SHA256[:]) == 1 {
				name = t.Name
			}
		}
		if name == "" {
			return nil, fmt.Errorf("%w: unknown bearer token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: name}, nil
	}
	authed := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(mcpHandler)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes", maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		authed.ServeHTTP(&challengeWriter{ResponseWriter: w}, r)
	})
}

// challengeWriter adds the WWW-Authenticate challenge RFC 6750 asks of a
// 401, which the SDK's middleware leaves out without OAuth metadata.
type challengeWriter struct {
	http.ResponseWriter
}

func (c *challengeWriter) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		c.Header().Set("WWW-Authenticate", `Bearer realm="bc-mcp"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

// Flush lets the SDK stream through the wrapper.
func (c *challengeWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ListenAddr resolves the address to listen on: an empty host is
// 127.0.0.1, and a host that is not loopback is refused unless remote
// access is allowed and TLS is on.
func ListenAddr(addr string, allowRemote, tlsOn bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http %q: %w", addr, err)
	}
	if host == "" {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	if host == "localhost" {
		return addr, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return addr, nil
	}
	if !allowRemote || !tlsOn {
		return "", fmt.Errorf("%w %s: pass --http-allow-remote and --http-tls-cert/--http-tls-key to serve beyond this machine", ErrRemoteRefused, addr)
	}
	return addr, nil
}

// ServeHTTP listens per cfg and serves the HTTP transport until ctx ends,
// then shuts down gracefully; ready, when set, is told the bound address.
func (s *Server) ServeHTTP(ctx context.Context, cfg HTTPConfig, ready func(net.Addr)) error {
	if len(cfg.Tokens) == 0 {
		return errors.New("the HTTP transport needs bearer tokens (--http-tokens)")
	}
	tlsOn := cfg.TLSCert != "" || cfg.TLSKey != ""
	addr, err := ListenAddr(cfg.Addr, cfg.AllowRemote, tlsOn)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	if tlsOn {
		pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			lis.Close()
			return fmt.Errorf("loading the HTTP TLS certificate: %w", err)
		}
		lis = tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	}
	srv := &http.Server{Handler: s.HTTPHandler(cfg.Tokens, cfg.MaxBodyBytes),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	s.logger.Info("serving over HTTP", "addr", lis.Addr().String(), "tls", tlsOn, "tokens", len(cfg.Tokens))
	if ready != nil {
		ready(lis.Addr())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutting down HTTP: %w", err)
	}
	<-done //nolint:errcheck // what Serve returns after Shutdown is http.ErrServerClosed, the stop asked for
	return nil
}
