package trust

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := NewEd25519()
	require.NoError(t, err)
	return k
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func bundleOf(version int64, roots ...ed25519.PrivateKey) *Bundle {
	b := &Bundle{Version: version, IssuedAt: t0}
	for _, r := range roots {
		b.Roots = append(b.Roots, Root{PublicKey: pub(r)})
	}
	return b
}

func signedCommand(t testing.TB, w *WorkerKey, c *agentv1.Command) *agentv1.CommandEnvelope {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	require.NoError(t, err)
	return &agentv1.CommandEnvelope{Command: b, Signature: w.Sign(PurposeCommand, b), WorkerCert: w.Cert}
}

func testCommand(node string) *agentv1.Command {
	return &agentv1.Command{Id: "cmd_1", NodeId: node, Kind: "gpu.reset", Payload: []byte(`{"gpus":["GPU-1"]}`),
		NotAfter: timestamppb.New(t0.Add(time.Hour)), CreatedAt: timestamppb.New(t0)}
}

// "a signature made for one purpose never verifies for another"
func TestSignature_OnePurposeNeverVerifiesForAnother(t *testing.T) {
	k := key(t)
	body := []byte(`{"x":1}`)
	sig := SignEd25519(k, PurposeCommand, body)
	require.NoError(t, VerifyEd25519(pub(k), PurposeCommand, body, sig))
	for _, p := range []Purpose{PurposeDesiredState, PurposeWorkerKey, PurposeTrustBundle, PurposeCommandUpdate, PurposeBatchApproval, PurposeAllocationBound} {
		require.ErrorIs(t, VerifyEd25519(pub(k), p, body, sig), ErrBadSignature, p)
	}
	require.ErrorIs(t, VerifyEd25519(pub(k), PurposeCommand, []byte(`{"x":2}`), sig), ErrBadSignature)
}

func TestKeyID_IsDerivedFromTheKey(t *testing.T) {
	a, b := key(t), key(t)
	require.Equal(t, Ed25519KeyID(pub(a)), Ed25519KeyID(pub(a)))
	require.NotEqual(t, Ed25519KeyID(pub(a)), Ed25519KeyID(pub(b)))
	require.Len(t, Ed25519KeyID(pub(a)), 64)
}

func TestVerifyCommand_AcceptsTheSignedCommandForThisNode(t *testing.T) {
	root := key(t)
	w, err := NewWorkerKey(root, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	env := signedCommand(t, w, testCommand("node_a"))
	c, err := VerifyCommand(bundleOf(1, root), env, "node_a", t0)
	require.NoError(t, err)
	require.Equal(t, "gpu.reset", c.GetKind())
	require.JSONEq(t, `{"gpus":["GPU-1"]}`, string(c.GetPayload()))
}

// The hostile-gateway cases of check 4, at the verifier.
func TestVerifyCommand_RefusesWhatAGatewayCouldForge(t *testing.T) {
	root, other := key(t), key(t)
	w, err := NewWorkerKey(root, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	attacker, err := NewWorkerKey(other, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	expired, err := NewWorkerKey(root, t0.Add(-30*time.Hour), 24*time.Hour)
	require.NoError(t, err)
	b := bundleOf(1, root)

	good := signedCommand(t, w, testCommand("node_a"))
	widened := proto.Clone(good).(*agentv1.CommandEnvelope)
	c := testCommand("node_a")
	c.Payload = []byte(`{"gpus":["GPU-1","GPU-2","GPU-3","GPU-4","GPU-5","GPU-6","GPU-7","GPU-8"]}`)
	widened.Command, _ = proto.Marshal(c)
	otherKind := proto.Clone(good).(*agentv1.CommandEnvelope)
	c = testCommand("node_a")
	c.Kind = "node.reboot"
	otherKind.Command, _ = proto.Marshal(c)
	garbage := proto.Clone(good).(*agentv1.CommandEnvelope)
	garbage.Signature = []byte("garbage")
	unsigned := &agentv1.CommandEnvelope{Command: good.Command}

	cases := map[string]struct {
		env  *agentv1.CommandEnvelope
		b    *Bundle
		node string
		want error
	}{
		"unsigned":                     {unsigned, b, "node_a", ErrMalformed},
		"garbage signature":            {garbage, b, "node_a", ErrBadSignature},
		"attacker's own root":          {signedCommand(t, attacker, testCommand("node_a")), b, "node_a", ErrUnknownKey},
		"expired worker key":           {signedCommand(t, expired, testCommand("node_a")), b, "node_a", ErrExpired},
		"worker key of a removed root": {good, bundleOf(2, other), "node_a", ErrUnknownKey},
		"signed for another node":      {signedCommand(t, w, testCommand("node_b")), b, "node_a", ErrBadSignature},
		"payload widened after":        {widened, b, "node_a", ErrBadSignature},
		"kind altered after":           {otherKind, b, "node_a", ErrBadSignature},
		"no roots at all":              {good, &Bundle{Version: 1}, "node_a", ErrUnknownKey},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyCommand(tc.b, tc.env, tc.node, t0)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// "worker certificate within its window (allow a small, documented clock skew)"
func TestWorkerCert_WindowAllowsTheDocumentedSkew(t *testing.T) {
	root := key(t)
	w, err := NewWorkerKey(root, t0, time.Hour)
	require.NoError(t, err)
	env := signedCommand(t, w, testCommand("n"))
	b := bundleOf(1, root)
	for _, at := range []time.Time{t0.Add(-DefaultClockSkew + time.Second), t0.Add(time.Hour + DefaultClockSkew - time.Second)} {
		_, err := VerifyCommand(b, env, "n", at)
		require.NoError(t, err, at)
	}
	for _, at := range []time.Time{t0.Add(-DefaultClockSkew - time.Second), t0.Add(time.Hour + DefaultClockSkew)} {
		_, err := VerifyCommand(b, env, "n", at)
		require.ErrorIs(t, err, ErrExpired, at)
	}
}

func TestWorkerCert_LifetimeIsAtMostADay(t *testing.T) {
	_, err := NewWorkerKey(key(t), t0, 25*time.Hour)
	require.Error(t, err)
}

func TestWorkerCert_OnlyItsPurposes(t *testing.T) {
	root := key(t)
	wpub, wpriv, err := NewEd25519()
	require.NoError(t, err)
	cert, err := IssueWorkerCert(root, wpub, t0, time.Hour, PurposeDesiredState)
	require.NoError(t, err)
	body := []byte("x")
	_, err = VerifyWorkerSigned(bundleOf(1, root), cert, PurposeCommand, body, SignEd25519(wpriv, PurposeCommand, body), t0)
	require.ErrorIs(t, err, ErrUnknownKey)
}

func TestBundle_UpdateRules(t *testing.T) {
	r1, r2, attacker := key(t), key(t), key(t)
	v1, err := SignBundle(*bundleOf(1, r1), r1)
	require.NoError(t, err)
	cur, curS, err := VerifyBundle(v1, nil, t0)
	require.NoError(t, err)

	// A rotation: v2 holds both roots and is signed by the root trusted now.
	v2, err := SignBundle(*bundleOf(2, r1, r2), r1)
	require.NoError(t, err)
	got, gotS, changed, err := VerifyUpdate(cur, curS, v2, t0)
	require.NoError(t, err)
	require.True(t, changed)
	require.Len(t, got.Roots, 2)
	// v3 drops r1 and is signed by r2 alone, which v2 made trusted.
	v3, err := SignBundle(*bundleOf(3, r2), r2)
	require.NoError(t, err)
	got3, got3S, changed, err := VerifyUpdate(got, gotS, v3, t0)
	require.NoError(t, err)
	require.True(t, changed)

	// A node offline across the rotation (still at v1) cannot take v3.
	_, _, _, err = VerifyUpdate(cur, curS, v3, t0)
	require.ErrorIs(t, err, ErrUnknownKey)
	// A lower version is a rollback.
	_, _, _, err = VerifyUpdate(got3, got3S, v2, t0)
	require.ErrorIs(t, err, ErrBundleRollback)
	// The same version with other content is refused; the same bytes change nothing.
	other, err := SignBundle(Bundle{Version: 3, Roots: []Root{{PublicKey: pub(attacker)}}, IssuedAt: t0}, r2)
	require.NoError(t, err)
	_, _, _, err = VerifyUpdate(got3, got3S, other, t0)
	require.ErrorIs(t, err, ErrBundleConflict)
	_, _, changed, err = VerifyUpdate(got3, got3S, v3, t0)
	require.NoError(t, err)
	require.False(t, changed)
	// "a Welcome carrying the attacker's own trust bundle"
	own, err := SignBundle(*bundleOf(99, attacker), attacker)
	require.NoError(t, err)
	_, _, _, err = VerifyUpdate(got3, got3S, own, t0)
	require.ErrorIs(t, err, ErrUnknownKey)
	// A bundle its own roots did not sign is refused even at join.
	unsignedByRoots, err := SignBundle(*bundleOf(1, r1), attacker)
	require.NoError(t, err)
	_, _, err = VerifyBundle(unsignedByRoots, nil, t0)
	require.ErrorIs(t, err, ErrUnknownKey)
}

func TestBundle_ExpiredRootVerifiesNothing(t *testing.T) {
	root := key(t)
	b := &Bundle{Version: 1, Roots: []Root{{PublicKey: pub(root), Window: Window{NotAfter: t0.Add(-time.Hour)}}}}
	w, err := NewWorkerKey(root, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	_, err = VerifyCommand(b, signedCommand(t, w, testCommand("n")), "n", t0)
	require.ErrorIs(t, err, ErrExpired)
}

func nodeCert(t *testing.T, nodeID string) (*x509.CertPool, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, caKey.Public(), caKey)
	require.NoError(t, err)
	ca, _ := x509.ParseCertificate(caDER)
	nk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	uris, err := IdentityURIs(Identity{NodeID: nodeID})
	require.NoError(t, err)
	nt := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour), URIs: uris,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, nt, ca, nk.Public(), caKey)
	require.NoError(t, err)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, cert, nk
}

// "For attested kinds bcd signs its result with its node key ... over the
// command id, the state, the SHA-256 of the result, and the digest of the
// signed command it answers"
func TestResult_AttestationBindsCommandStateAndResult(t *testing.T) {
	pool, cert, nk := nodeCert(t, "node_a")
	sum := sha256.Sum256([]byte(`{"pass":true}`))
	st := ResultStatement{CommandID: "cmd_1", CommandDigest: CommandDigest([]byte("cmd-bytes")), NodeID: "node_a", State: "succeeded", ResultSHA256: sum[:]}
	sig, err := SignResult(nk, st)
	require.NoError(t, err)
	require.NoError(t, VerifyResult(pool, cert, st, sig, t0))

	tampered := st
	other := sha256.Sum256([]byte(`{"pass":false}`))
	tampered.ResultSHA256 = other[:]
	require.ErrorIs(t, VerifyResult(pool, cert, tampered, sig, t0), ErrBadSignature)
	moved := st
	moved.CommandID, moved.CommandDigest = "cmd_2", CommandDigest([]byte("other-cmd"))
	require.ErrorIs(t, VerifyResult(pool, cert, moved, sig, t0), ErrBadSignature)
	state := st
	state.State = "failed"
	require.ErrorIs(t, VerifyResult(pool, cert, state, sig, t0), ErrBadSignature)
	require.ErrorIs(t, VerifyResult(pool, cert, st, nil, t0), ErrNoAttestation)
	otherNode := st
	otherNode.NodeID = "node_b"
	require.ErrorIs(t, VerifyResult(pool, cert, otherNode, sig, t0), ErrBadSignature)
	// A certificate of another CA does not verify.
	pool2, _, _ := nodeCert(t, "node_a")
	require.Error(t, VerifyResult(pool2, cert, st, sig, t0))
}

// "a Welcome claiming the time was 48 hours earlier made an hour-expired
// command run": the offset is bounded, and time never reads earlier than a
// signed time the node verified.
func TestClock_ALyingWelcomeCannotReviveExpiredCommands(t *testing.T) {
	now := t0
	c := &Clock{Now: func() time.Time { return now }}
	applied, refused := c.ObserveServerTime(t0.Add(-48 * time.Hour))
	require.Zero(t, applied)
	require.Equal(t, -48*time.Hour, refused)
	require.Equal(t, t0, c.ServerNow())

	applied, refused = c.ObserveServerTime(t0.Add(2 * time.Minute))
	require.Equal(t, 2*time.Minute, applied)
	require.Zero(t, refused)
	require.Equal(t, t0.Add(2*time.Minute), c.ServerNow())

	c.ObserveServerTime(t0.Add(-4 * time.Minute))
	c.ObserveSigned(t0.Add(time.Minute))
	require.Equal(t, t0.Add(time.Minute), c.ServerNow(), "never earlier than a verified signing time")
}

func TestDecoders_RefuseMalformedInput(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"body":""}`, `{"body":"eA==","signatures":[]}`, `{"body":"eA==","signatures":[{}]} trailing`, `{"body":"eA==","signatures":[{}],"extra":1}`} {
		_, err := DecodeSigned([]byte(in))
		require.ErrorIs(t, err, ErrMalformed, in)
	}
	_, _, err := DecodeBundle(Signed{Body: []byte(`{"version":0,"roots":[],"issuedAt":"2026-01-01T00:00:00Z"}`), Signatures: []Signature{{}}}.Encode())
	require.ErrorIs(t, err, ErrMalformed)
	_, _, err = DecodeWorkerCert(Signed{Body: []byte(`{"publicKey":"eA==","rootKeyId":"","purposes":[],"notBefore":"2026-01-01T00:00:00Z","notAfter":"2026-01-02T00:00:00Z"}`), Signatures: []Signature{{}}}.Encode())
	require.ErrorIs(t, err, ErrMalformed)
}

// "Each NodeSpec generation is signed (purpose desired-state) ... bcd
// verifies before applying and refuses a forged spec"
func TestVerifySpec_OnlyTheSignedStatementForThisNode(t *testing.T) {
	root := key(t)
	w, err := NewWorkerKey(root, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	b := bundleOf(1, root)
	st, err := SpecStatement{NodeID: "node_a", Generation: 3, Spec: []byte(`{"holds":[]}`)}.Encode()
	require.NoError(t, err)
	sig := w.Sign(PurposeDesiredState, st)
	got, err := VerifySpec(b, w.Cert, st, sig, "node_a", t0)
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Generation)

	_, err = VerifySpec(b, w.Cert, st, sig, "node_b", t0)
	require.ErrorIs(t, err, ErrBadSignature)
	forged, _ := SpecStatement{NodeID: "node_a", Generation: 4, Spec: []byte(`{}`)}.Encode()
	_, err = VerifySpec(b, w.Cert, forged, sig, "node_a", t0)
	require.ErrorIs(t, err, ErrBadSignature)
	// A command signature is not a spec signature.
	_, err = VerifySpec(b, w.Cert, st, w.Sign(PurposeCommand, st), "node_a", t0)
	require.ErrorIs(t, err, ErrBadSignature)
}

// Without command-signing roots the gateway is trusted anyway: "the daemon
// keeps the offset from Welcome.server_time", however large.
func TestClock_ApplyServerTimeKeepsAnyOffset(t *testing.T) {
	now := t0
	c := &Clock{Now: func() time.Time { return now }}
	require.Equal(t, -48*time.Hour, c.ApplyServerTime(t0.Add(-48*time.Hour)))
	require.Equal(t, t0.Add(-48*time.Hour), c.ServerNow())
	applied, refused := c.Offset()
	require.Equal(t, -48*time.Hour, applied)
	require.Zero(t, refused)
	require.Equal(t, DefaultClockSkew, c.MaxOffset())
}

// A WorkerCache verifies one signature per command, but refuses all that
// VerifyCommand refuses, with the certificate already remembered: other
// bytes, another node, the certificate's window closed, the root's window
// closed, the root removed by a new bundle.
func TestWorkerCache_RefusesWhatVerifyCommandRefuses(t *testing.T) {
	root, other := key(t), key(t)
	w, err := NewWorkerKey(root, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(t, err)
	b := bundleOf(1, root)
	var wc WorkerCache
	good := signedCommand(t, w, testCommand("node_a"))
	_, err = wc.VerifyCommand(b, good, "node_a", t0)
	require.NoError(t, err)
	_, err = wc.VerifyCommand(b, good, "node_a", t0)
	require.NoError(t, err, "again, from the cache")

	widened := proto.Clone(good).(*agentv1.CommandEnvelope)
	c := testCommand("node_a")
	c.Payload = []byte(`{"gpus":["GPU-1","GPU-2"]}`)
	widened.Command, _ = proto.Marshal(c)
	_, err = wc.VerifyCommand(b, widened, "node_a", t0)
	require.ErrorIs(t, err, ErrBadSignature)
	_, err = wc.VerifyCommand(b, signedCommand(t, w, testCommand("node_b")), "node_a", t0)
	require.ErrorIs(t, err, ErrBadSignature)
	_, err = wc.VerifyCommand(b, good, "node_a", t0.Add(24*time.Hour))
	require.ErrorIs(t, err, ErrExpired, "the certificate's window is checked on every use")
	closing := &Bundle{Version: 1, Roots: []Root{{PublicKey: pub(root), Window: Window{NotAfter: t0.Add(time.Hour)}}}}
	_, err = wc.VerifyCommand(closing, good, "node_a", t0)
	require.NoError(t, err)
	_, err = wc.VerifyCommand(closing, good, "node_a", t0.Add(2*time.Hour))
	require.ErrorIs(t, err, ErrExpired, "the root's window is checked on every use")
	_, err = wc.VerifyCommand(bundleOf(2, other), good, "node_a", t0)
	require.ErrorIs(t, err, ErrUnknownKey, "a new bundle without the root forgets the certificate")
	_, err = wc.VerifyCommand(b, &agentv1.CommandEnvelope{Command: good.Command, WorkerCert: good.WorkerCert}, "node_a", t0)
	require.ErrorIs(t, err, ErrBadSignature, "unsigned")
}

// BenchmarkVerifyCommand is check 4 with the worker-key certificate
// remembered (WorkerCache, what bcd runs) beside the floor measured in the
// same run: the uncached VerifyCommand, which checks two signatures.
func BenchmarkVerifyCommand(b *testing.B) {
	root := key(b)
	w, err := NewWorkerKey(root, t0.Add(-time.Hour), 24*time.Hour)
	require.NoError(b, err)
	env := signedCommand(b, w, testCommand("node_a"))
	bd := bundleOf(1, root)
	var wc WorkerCache
	var cached, uncached time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := wc.VerifyCommand(bd, env, "node_a", t0); err != nil {
			b.Fatal(err)
		}
		cached += time.Since(start)
		start = time.Now()
		if _, err := VerifyCommand(bd, env, "node_a", t0); err != nil {
			b.Fatal(err)
		}
		uncached += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(cached.Nanoseconds())/float64(b.N), "cached-ns")
	b.ReportMetric(float64(uncached.Nanoseconds())/float64(b.N), "floor-uncached-ns")
	b.ReportMetric(float64(cached)/float64(uncached), "ratio")
}
