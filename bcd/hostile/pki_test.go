package hostile

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/internal/trust"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// nodeCA is the test's node CA: it issues the node's certificate (what
// `bcd join` would have received) and the gateway's.
type nodeCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

// serial numbers the certificates the tests issue.
var serial atomic.Int64

func newNodeCA(t *testing.T) *nodeCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "hostile test node CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &nodeCA{cert: cert, key: key, pem: trust.PEMBlock("CERTIFICATE", der), pool: pool}
}

func (ca *nodeCA) issue(t *testing.T, tmpl *x509.Certificate) (*x509.Certificate, []byte, *ecdsa.PrivateKey) {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, trust.PEMBlock("CERTIFICATE", der), key
}

// node issues a node certificate for id, as the join endpoint does.
func (ca *nodeCA) node(t *testing.T, id trust.Identity) (certPEM, keyPEM []byte) {
	t.Helper()
	uris, err := trust.IdentityURIs(id)
	require.NoError(t, err)
	_, certPEM, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: id.NodeID}, URIs: uris,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	keyPEM, err = trust.MarshalPrivateKeyPEM(key)
	require.NoError(t, err)
	return certPEM, keyPEM
}

// gatewayTLS is the gateway's side of mTLS: a server certificate for
// 127.0.0.1 and node certificates required and verified against the CA.
func (ca *nodeCA) gatewayTLS(t *testing.T) *tls.Config {
	t.Helper()
	cert, _, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "gateway"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
		ClientCAs:    ca.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}
}

// authority is the command-signing side of the control plane, in the
// test: the roots, the worker keys they certify and the trust bundles they
// sign.
type authority struct {
	t *testing.T
	// old and current are the roots: version 1 of the bundle holds both,
	// version 2 only current (old is removed).
	old, current ed25519.PrivateKey
	// worker is certified by current; oldWorker by old; expired by current
	// for a window that ended six hours ago.
	worker, oldWorker, expired *trust.WorkerKey
	// v1 and v2 are the signed bundles.
	v1, v2 []byte
	// attacker is a root the node never trusted, with its worker key and
	// its own bundle.
	attacker       ed25519.PrivateKey
	attackerWorker *trust.WorkerKey
	attackerBundle []byte
}

func newAuthority(t *testing.T) *authority {
	t.Helper()
	a := &authority{t: t}
	a.old, a.current, a.attacker = edKey(t), edKey(t), edKey(t)
	now := time.Now()
	var err error
	a.worker, err = trust.NewWorkerKey(a.current, now.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	a.oldWorker, err = trust.NewWorkerKey(a.old, now.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	a.expired, err = trust.NewWorkerKey(a.current, now.Add(-30*time.Hour), 24*time.Hour)
	require.NoError(t, err)
	a.attackerWorker, err = trust.NewWorkerKey(a.attacker, now.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	a.v1 = a.bundle(1, []ed25519.PrivateKey{a.old, a.current}, a.old, a.current)
	a.v2 = a.bundle(2, []ed25519.PrivateKey{a.current}, a.current)
	a.attackerBundle = a.bundle(99, []ed25519.PrivateKey{a.attacker}, a.attacker)
	return a
}

func edKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := trust.NewEd25519()
	require.NoError(t, err)
	return k
}

// bundle signs a bundle of version holding roots with signers.
func (a *authority) bundle(version int64, roots []ed25519.PrivateKey, signers ...ed25519.PrivateKey) []byte {
	b := trust.Bundle{Version: version, IssuedAt: time.Now().Add(-time.Minute).UTC().Truncate(time.Second)}
	for _, r := range roots {
		b.Roots = append(b.Roots, trust.Root{PublicKey: r.Public().(ed25519.PublicKey)})
	}
	w, err := trust.SignBundle(b, signers...)
	require.NoError(a.t, err)
	return w
}

// sign makes the envelope a gateway relays: the exact command bytes, the
// worker key's signature over them and its certificate.
func sign(t *testing.T, w *trust.WorkerKey, c *agentv1.Command) *agentv1.CommandEnvelope {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	require.NoError(t, err)
	return &agentv1.CommandEnvelope{Command: b, Signature: w.Sign(trust.PurposeCommand, b), WorkerCert: w.Cert}
}

// signedSpec is a Spec as the gateway relays a signed generation.
func signedSpec(t *testing.T, w *trust.WorkerKey, node string, generation int64, spec string) *agentv1.Spec {
	t.Helper()
	st, err := trust.SpecStatement{NodeID: node, Generation: generation, Spec: []byte(spec)}.Encode()
	require.NoError(t, err)
	return &agentv1.Spec{Generation: generation, Spec: []byte(spec), Signed: st, Signature: w.Sign(trust.PurposeDesiredState, st), WorkerCert: w.Cert}
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
