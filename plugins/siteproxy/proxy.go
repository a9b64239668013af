// Package siteproxy is bc-kind-siteproxy: site.httpProxy, the break-glass
// HTTP request to a BMC. The command names a BMC by id; the agent sends the
// request only to that BMC's pinned address from the site inventory, only
// if the inventory's proxy.allow allows the method and path, never to a
// loopback, link-local or the agent's own address, follows no redirect,
// sends no CONNECT or Upgrade, caps the bytes and the time, adds the BMC's
// credential itself and returns the response (with any echo of the
// credential redacted) and its SHA-256. Typed bmc.* kinds are the normal
// path.
package siteproxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/plugins/siteproxy/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// Failure reasons.
const (
	ReasonInventory  = "site-inventory"
	ReasonUnknownBMC = "bmc-unknown"
	ReasonCredential = "bmc-credential"
	ReasonNotAllowed = "proxy-not-allowed"
	ReasonAddress    = "proxy-address-denied"
	ReasonRedirect   = "proxy-redirect"
	ReasonUpgrade    = "proxy-upgrade"
	ReasonTooLarge   = "proxy-too-large"
	ReasonRequest    = "proxy-request-failed"
	ReasonBadPayload = "bad-payload"
)

// DefaultTimeout is a request's time cap when the payload names none.
const DefaultTimeout = 30 * time.Second

// responseHeaders are the response headers returned; the rest (cookies,
// session tokens, authentication challenges) stay on the agent.
var responseHeaders = []string{"Content-Type", "Content-Length", "ETag", "Location", "OData-Version", "Allow", "Retry-After"}

// Plugin runs site.httpProxy.
type Plugin struct {
	// Inventory is the site inventory file, read at each command.
	Inventory string
	// Deny refuses addresses; DenyAddr by default. Tests that serve a fake
	// BMC on loopback wrap it to let exactly that address through.
	Deny func(netip.Addr) error
	// Credentials returns the credential source for a command: its
	// secretRefs first, then the inventory's credentials.dir.
	Credentials func(inv *site.Inventory, req kind.Request) site.CredentialSource
	Logger      hclog.Logger
}

// New returns the plugin for the inventory at path.
func New(inventory string, logger hclog.Logger) *Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Plugin{Inventory: inventory, Deny: DenyAddr, Logger: logger,
		Credentials: func(inv *site.Inventory, req kind.Request) site.CredentialSource {
			return site.CommandSecrets{Secrets: req.Command.Secrets, Fallback: site.FileCredentials{Dir: inv.Credentials.Dir}}
		}}
}

// Kind is the plugin's kind, for kind.Serve.
func (p *Plugin) Kind() kind.Kind {
	return kind.Kind{Manifest: manifest.Manifest, Handler: kind.HandlerFunc(p.handle)}
}

// Payload is site.httpProxy's payload.
type Payload struct {
	BMC            string            `json:"bmc"`
	Method         string            `json:"method"`
	Path           string            `json:"path"`
	Body           string            `json:"body,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	MaxBytes       int64             `json:"maxBytes,omitempty"`
	TimeoutSeconds int               `json:"timeoutSeconds,omitempty"`
}

// Result is site.httpProxy's result.
type Result struct {
	BMC     string            `json:"bmc"`
	Address string            `json:"address"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the response body as text, or BodyBase64 when it is not UTF-8.
	Body       string `json:"body,omitempty"`
	BodyBase64 string `json:"bodyBase64,omitempty"`
	Bytes      int64  `json:"bytes"`
	// SHA256 is the hash of the body exactly as the BMC sent it.
	SHA256 string `json:"sha256,omitempty"`
	// Redacted is set when the body echoed the credential and the copy
	// returned here has it replaced (SHA256 is still the BMC's bytes').
	Redacted      bool  `json:"redacted,omitempty"`
	ElapsedMillis int64 `json:"elapsedMillis"`
}

func fail(res *Result, reason, format string, args ...any) error {
	return &kind.Failure{Reason: reason, Message: fmt.Sprintf(format, args...), Result: res}
}

// CheckPath parses a payload's path: absolute, no scheme or host (a path
// cannot point the request anywhere but the pinned BMC), no fragment, no
// dot segments, doubled or percent-encoded slashes. It returns the path
// part and the raw query.
func CheckPath(p string) (string, string, error) {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "", "", fmt.Errorf("path %q: must be an absolute path such as /redfish/v1/Systems", p)
	}
	u, err := url.ParseRequestURI(p)
	if err != nil {
		return "", "", fmt.Errorf("path %q: %w", p, err)
	}
	if u.Scheme != "" || u.Host != "" || u.Opaque != "" || u.User != nil {
		return "", "", fmt.Errorf("path %q: names a host; the request goes only to the BMC's pinned address", p)
	}
	if strings.Contains(p, "#") {
		return "", "", fmt.Errorf("path %q: has a fragment", p)
	}
	if u.RawPath != "" || strings.Contains(u.Path, "%") {
		return "", "", fmt.Errorf("path %q: has percent-encoded characters in its path", p)
	}
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if clean != u.Path {
		return "", "", fmt.Errorf("path %q: has dot segments or doubled slashes (it would be %q)", p, clean)
	}
	return u.Path, u.RawQuery, nil
}

// Allowed reports whether the BMC's proxy rules allow method on p.
func Allowed(rules []site.ProxyRule, method, p string) bool {
	for _, r := range rules {
		if !slices.Contains(r.Methods, method) {
			continue
		}
		if prefix, ok := strings.CutSuffix(r.Path, "/**"); ok {
			if p == prefix || p == prefix+"/" || strings.HasPrefix(p, prefix+"/") {
				return true
			}
		} else if strings.TrimSuffix(p, "/") == strings.TrimSuffix(r.Path, "/") {
			return true
		}
	}
	return false
}

func describe(rules []site.ProxyRule) string {
	if len(rules) == 0 {
		return "nothing (the inventory lists no proxy.allow for it)"
	}
	var out []string
	for _, r := range rules {
		out = append(out, strings.Join(r.Methods, ",")+" "+r.Path)
	}
	return strings.Join(out, "; ")
}

func (p *Plugin) handle(ctx context.Context, req kind.Request) (any, error) {
	var pl Payload
	if err := req.Command.Decode(&pl); err != nil {
		return nil, kind.Fail(ReasonBadPayload, "%v", err)
	}
	res := &Result{BMC: pl.BMC, Method: pl.Method, Path: pl.Path}
	inv, err := site.LoadInventory(p.Inventory)
	if err != nil {
		return nil, fail(res, ReasonInventory, "%v", err)
	}
	b, err := inv.Lookup(pl.BMC)
	if err != nil {
		return nil, fail(res, ReasonUnknownBMC, "%v: the proxy reaches only BMCs the site inventory names", err)
	}
	ip, err := b.IP()
	if err != nil {
		return nil, fail(res, ReasonInventory, "BMC %s: %v", b.ID, err)
	}
	addr := netip.AddrPortFrom(ip, uint16(b.RedfishPort()))
	res.Address = addr.String()
	if pl.Method == http.MethodConnect || pl.Method == http.MethodTrace || pl.Method == http.MethodOptions {
		return nil, fail(res, ReasonNotAllowed, "method %s is never proxied", pl.Method)
	}
	reqPath, query, err := CheckPath(pl.Path)
	if err != nil {
		return nil, fail(res, ReasonNotAllowed, "%v", err)
	}
	if !Allowed(b.Proxy.Allow, pl.Method, reqPath) {
		return nil, fail(res, ReasonNotAllowed, "BMC %s's proxy rules do not allow %s %s; they allow %s", b.ID, pl.Method, reqPath, describe(b.Proxy.Allow))
	}
	if err := p.Deny(ip); err != nil {
		return nil, fail(res, ReasonAddress, "BMC %s's address: %v; the proxy never reaches it", b.ID, err)
	}
	cred, err := p.Credentials(inv, req).Credential(ctx, b.CredentialRef)
	if err != nil {
		return nil, fail(res, ReasonCredential, "BMC %s: %v", b.ID, err)
	}
	maxBytes := pl.MaxBytes
	if maxBytes <= 0 {
		maxBytes = manifest.DefaultBytes
	}
	timeout := DefaultTimeout
	if pl.TimeoutSeconds > 0 {
		timeout = time.Duration(pl.TimeoutSeconds) * time.Second
	}
	client, err := p.client(b, addr)
	if err != nil {
		return nil, fail(res, ReasonInventory, "BMC %s: %v", b.ID, err)
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	target := &url.URL{Scheme: "https", Host: addr.String(), Path: reqPath, RawQuery: query}
	var body io.Reader
	if pl.Body != "" {
		body = strings.NewReader(pl.Body)
	}
	hreq, err := http.NewRequestWithContext(ctx, pl.Method, target.String(), body)
	if err != nil {
		return nil, fail(res, ReasonRequest, "building the request: %v", err)
	}
	for k, v := range pl.Headers {
		hreq.Header.Set(k, v)
	}
	hreq.SetBasicAuth(cred.Username, cred.Password)
	start := time.Now()
	resp, err := client.Do(hreq)
	res.ElapsedMillis = time.Since(start).Milliseconds()
	if err != nil {
		return nil, fail(res, ReasonRequest, "%s %s on BMC %s: %v", pl.Method, reqPath, b.ID, scrub(err.Error(), cred))
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Headers = map[string]string{}
	for _, h := range responseHeaders {
		if v := resp.Header.Get(h); v != "" {
			res.Headers[h] = v
		}
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("Location") != "":
		return nil, fail(res, ReasonRedirect, "BMC %s answered %d with a redirect to %s, which the proxy does not follow", b.ID, resp.StatusCode, resp.Header.Get("Location"))
	case resp.StatusCode == http.StatusSwitchingProtocols:
		return nil, fail(res, ReasonUpgrade, "BMC %s switched protocols, which the proxy does not allow", b.ID)
	}
	h := sha256.New()
	data, err := io.ReadAll(io.TeeReader(io.LimitReader(resp.Body, maxBytes+1), h))
	res.ElapsedMillis = time.Since(start).Milliseconds()
	if err != nil {
		return nil, fail(res, ReasonRequest, "reading the response from BMC %s: %v", b.ID, err)
	}
	if int64(len(data)) > maxBytes {
		res.Bytes = int64(len(data))
		return nil, fail(res, ReasonTooLarge, "BMC %s's response is over the %d-byte cap; ask for less (a narrower path) or raise maxBytes", b.ID, maxBytes)
	}
	res.Bytes = int64(len(data))
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	text := string(data)
	if s := scrub(text, cred); s != text {
		res.Redacted, text = true, s
	}
	if utf8.ValidString(text) {
		res.Body = text
	} else {
		res.BodyBase64 = base64.StdEncoding.EncodeToString([]byte(text))
	}
	req.Logger.Info("proxied a request to a BMC", "bmc", b.ID, "method", pl.Method, "path", reqPath, "status", resp.StatusCode, "bytes", res.Bytes, "sha256", res.SHA256)
	return res, nil
}

// scrub replaces the credential's password and its basic-auth token in s.
func scrub(s string, cred site.Credential) string {
	if cred.Password != "" {
		s = strings.ReplaceAll(s, cred.Password, "[redacted]")
	}
	tok := base64.StdEncoding.EncodeToString([]byte(cred.Username + ":" + cred.Password))
	return strings.ReplaceAll(s, tok, "[redacted]")
}

// client is an HTTP client that reaches only addr: it dials the pinned
// address whatever the request names, checks the connection's remote
// address again, uses no proxy from the environment, follows no
// redirect, and never upgrades (HTTP/2 off: no h2c, no extended CONNECT).
func (p *Plugin) client(b site.BMC, addr netip.AddrPort) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: b.Redfish.ServerName, NextProtos: []string{"http/1.1"}}
	if tlsCfg.ServerName == "" {
		tlsCfg.ServerName = addr.Addr().String()
	}
	if b.Redfish.CAFile != "" {
		pem, err := os.ReadFile(b.Redfish.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the BMC's CA file: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", b.Redfish.CAFile)
		}
		tlsCfg.RootCAs = roots
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy:           nil,
		TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, "tcp", addr.String())
			if err != nil {
				return nil, err
			}
			ra, ok := c.RemoteAddr().(*net.TCPAddr)
			if !ok || ra.AddrPort().Addr().Unmap() != addr.Addr() {
				_ = c.Close()
				return nil, errors.New("connected to another address than the pinned one")
			}
			return c, nil
		},
		ForceAttemptHTTP2:      false,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}
