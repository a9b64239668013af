package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/better-compute/commands/bcd/truststore"
	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// The files `bcd join` writes under the state directory's tls/ folder.
const (
	tlsDirName   = "tls"
	keyFileName  = "node.key"
	certFileName = "node.crt"
	caFileName   = "ca.crt"
	joinFileName = "join.json"
)

// joinInfo is what bcd join remembers beside the key and certificates, so
// that `bcd run` needs no more flags than before.
type joinInfo struct {
	NodeID string `json:"nodeId"`
	// Server is the gateway the node joined through; bcd run connects to
	// it when no controlPlane is configured.
	Server string `json:"server"`
}

func tlsDir(stateDir string) string { return filepath.Join(stateDir, tlsDirName) }

// cmdJoin exchanges a one-time join token for a node certificate: it makes a
// key and a CSR, calls bc.agent.v1.Join over TLS (verifying the gateway
// against --ca-file: the joining node has no certificate yet), and writes
// the key, the certificate and the node CA under the state directory.
func cmdJoin(args []string, stdout, stderr io.Writer) error {
	fs, cf := flags("join", "--token T --server ADDR --ca-file F [flags]", stderr)
	token := fs.String("token", "", "one-time join token (required)")
	server := fs.String("server", "", "the gateway's host:port (required)")
	caFile := fs.String("ca-file", "", "PEM CA that verifies the gateway at join (required)")
	timeout := fs.Duration("timeout", 30*time.Second, "bound the join call")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *token == "" || *server == "" || *caFile == "" {
		return &exitError{code: 2, err: errors.New("join needs --token, --server and --ca-file")}
	}
	cfg, err := cf.Load()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--ca-file: %w", err)}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return &exitError{code: 2, err: fmt.Errorf("--ca-file %s: no PEM certificate", *caFile)}
	}
	// Read before the token is spent: a bad anchor file is the operator's
	// to fix first.
	anchors, err := loadAnchors(cfg.TrustAnchors)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	name := cfg.NodeID
	if name == "" {
		name = "bcd"
	}
	keyPEM, csr, err := trust.NewKeyAndCSR(name)
	if err != nil {
		return fmt.Errorf("making the node key: %w", err)
	}
	conn, err := grpc.NewClient(*server, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})))
	if err != nil {
		return fmt.Errorf("dialing %s: %w", *server, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := agentv1.NewJoinClient(conn).Join(ctx, &agentv1.JoinRequest{Token: *token, Csr: csr})
	if err != nil {
		return fmt.Errorf("join: %w", err)
	}
	cert, err := trust.ParseCertPEM(resp.GetCertificate())
	if err != nil {
		return fmt.Errorf("join: the certificate returned: %w", err)
	}
	id, err := trust.IdentityOf(cert)
	if err != nil {
		return fmt.Errorf("join: the certificate returned: %w", err)
	}
	if cfg.NodeID != "" && cfg.NodeID != id.NodeID {
		return fmt.Errorf("join: the token is for node %s but this bcd is configured as %s", id.NodeID, cfg.NodeID)
	}
	dir := tlsDir(cfg.StateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	info, _ := json.Marshal(joinInfo{NodeID: id.NodeID, Server: *server})
	ca := resp.GetCa()
	if len(ca) == 0 {
		ca = caPEM
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{keyFileName, keyPEM}, {certFileName, resp.GetCertificate()}, {caFileName, ca}, {joinFileName, info}} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	// The join answer's trust bundle: from here on the node takes only
	// versions its roots signed. Without one (no pki.commandSigning)
	// commands go unsigned, unless the node has trust anchors.
	if tb := resp.GetTrustBundle(); len(tb.GetSigned()) > 0 {
		ts, err := truststore.Open(cfg.StateDir, anchors, nil)
		if err != nil {
			return err
		}
		if err := ts.AcceptJoin(tb.GetSigned(), time.Now()); err != nil {
			return fmt.Errorf("join: %w", err)
		}
		fmt.Fprintf(stdout, "joined as %s (role %s); certificate in %s; trust bundle version %d (commands must be signed)\n", id.NodeID, id.Role, dir, ts.Version())
		return nil
	}
	if len(anchors) > 0 {
		fmt.Fprintf(stdout, "joined as %s (role %s); certificate in %s; no trust bundle yet (commands must be signed: this node has trust anchors)\n", id.NodeID, id.Role, dir)
		return nil
	}
	fmt.Fprintf(stdout, "joined as %s (role %s); certificate in %s; no trust bundle (commands go unsigned)\n", id.NodeID, id.Role, dir)
	return nil
}

// writeFileAtomic writes a file whole (temp, sync, rename), mode 0600.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}

// joined is the node's identity from `bcd join`: the mTLS configuration of
// its sessions and what its certificate says.
type joined struct {
	info joinInfo
	id   trust.Identity
	tls  *tls.Config
}

// loadJoined reads what bcd join wrote; found is false when it never ran.
func loadJoined(stateDir string) (j joined, found bool, err error) {
	dir := tlsDir(stateDir)
	b, err := os.ReadFile(filepath.Join(dir, joinFileName))
	if errors.Is(err, os.ErrNotExist) {
		return j, false, nil
	}
	if err != nil {
		return j, false, fmt.Errorf("reading %s: %w", joinFileName, err)
	}
	if err := json.Unmarshal(b, &j.info); err != nil {
		return j, false, fmt.Errorf("%s: %w", filepath.Join(dir, joinFileName), err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certFileName), filepath.Join(dir, keyFileName))
	if err != nil {
		return j, false, fmt.Errorf("node certificate in %s: %w", dir, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return j, false, fmt.Errorf("node certificate in %s: %w", dir, err)
	}
	if j.id, err = trust.IdentityOf(leaf); err != nil {
		return j, false, fmt.Errorf("node certificate in %s: %w", dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caFileName))
	if err != nil {
		return j, false, fmt.Errorf("node CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return j, false, fmt.Errorf("node CA %s: no PEM certificate", filepath.Join(dir, caFileName))
	}
	j.tls = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	return j, true, nil
}

// loadAnchors reads the trustAnchors public keys.
func loadAnchors(paths []string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for _, p := range paths {
		k, err := trust.LoadEd25519PublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("trustAnchors: %w", err)
		}
		out = append(out, k)
	}
	return out, nil
}
