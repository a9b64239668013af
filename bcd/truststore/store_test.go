package truststore

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
)

func root(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := trust.NewEd25519()
	require.NoError(t, err)
	return k
}

func bundle(t *testing.T, version int64, signers []ed25519.PrivateKey, roots ...ed25519.PrivateKey) []byte {
	t.Helper()
	b := trust.Bundle{Version: version, IssuedAt: time.Now()}
	for _, r := range roots {
		b.Roots = append(b.Roots, trust.Root{PublicKey: r.Public().(ed25519.PublicKey)})
	}
	w, err := trust.SignBundle(b, signers...)
	require.NoError(t, err)
	return w
}

// "bcd persists the trust bundle and the highest version it accepted; a
// lower version is refused; a new version verifies under the roots the node
// already trusts (or arrives at join)."
func TestStore_JoinThenOnlyNewerVersionsItsRootsSigned(t *testing.T) {
	dir := t.TempDir()
	r1, r2, attacker := root(t), root(t), root(t)
	s, err := Open(dir, nil, nil)
	require.NoError(t, err)
	require.False(t, s.HasCommandSigningRoots())

	// Before join, a Welcome's bundle is refused: the first comes at join.
	_, err = s.Offer(bundle(t, 1, []ed25519.PrivateKey{r1}, r1), time.Now())
	require.ErrorIs(t, err, ErrNoBundle)

	require.NoError(t, s.AcceptJoin(bundle(t, 1, []ed25519.PrivateKey{r1}, r1), time.Now()))
	require.True(t, s.HasCommandSigningRoots())

	changed, err := s.Offer(bundle(t, 2, []ed25519.PrivateKey{r1}, r1, r2), time.Now())
	require.NoError(t, err)
	require.True(t, changed)
	_, err = s.Offer(bundle(t, 1, []ed25519.PrivateKey{r1}, r1), time.Now())
	require.ErrorIs(t, err, trust.ErrBundleRollback)
	_, err = s.Offer(bundle(t, 50, []ed25519.PrivateKey{attacker}, attacker), time.Now())
	require.ErrorIs(t, err, trust.ErrUnknownKey)
	require.Equal(t, int64(2), s.Version())

	// It survives a restart, and the file is the node's own (0600).
	s2, err := Open(dir, nil, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), s2.Version())
	st, err := os.Stat(filepath.Join(dir, FileName))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	// A join answer lower than what is held is a rollback too.
	require.ErrorIs(t, s2.AcceptJoin(bundle(t, 1, []ed25519.PrivateKey{r1}, r1), time.Now()), trust.ErrBundleRollback)
	// A join answer whose roots did not sign it is refused.
	require.Error(t, s2.AcceptJoin(bundle(t, 3, []ed25519.PrivateKey{attacker}, r1), time.Now()))
}

func TestStore_AnAnchorLetsAWelcomeBringTheFirstBundle(t *testing.T) {
	r1, attacker := root(t), root(t)
	s, err := Open(t.TempDir(), []ed25519.PublicKey{r1.Public().(ed25519.PublicKey)}, nil)
	require.NoError(t, err)
	_, err = s.Offer(bundle(t, 1, []ed25519.PrivateKey{attacker}, attacker), time.Now())
	require.ErrorIs(t, err, trust.ErrUnknownKey)
	changed, err := s.Offer(bundle(t, 1, []ed25519.PrivateKey{r1}, r1), time.Now())
	require.NoError(t, err)
	require.True(t, changed)
}

func TestStore_ACorruptFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(`{"body":"eA==","signatures":[]}`), 0o600))
	_, err := Open(dir, nil, nil)
	require.ErrorContains(t, err, "rejoin")
}
