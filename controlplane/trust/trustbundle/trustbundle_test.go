package trustbundle

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/controlplane/trust/signing"
	"github.com/better-compute/commands/internal/trust"
)

func writePub(t *testing.T, dir, name string) string {
	t.Helper()
	pub, _, err := trust.NewEd25519()
	require.NoError(t, err)
	p, err := trust.MarshalPublicKeyPEM(pub)
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, p, 0o644))
	return path
}

// "at a version that follows the bundle's content and never goes below
// pki.trustVersion"
func TestPublish_VersionFollowsContentNeverBelowTrustVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.DB(t)
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	a, err := signing.New(root, signing.Options{})
	require.NoError(t, err)
	dir := t.TempDir()
	now := time.Now()

	none, err := Latest(ctx, pool)
	require.NoError(t, err)
	require.Nil(t, none, "no bundle until one is published: commands go unsigned")

	c1, err := Content(Settings{}, a.RootPublic())
	require.NoError(t, err)
	b1, err := Publish(ctx, pool, c1, a, 0, now)
	require.NoError(t, err)
	require.Equal(t, int64(1), b1.Version)
	again, err := Publish(ctx, pool, c1, a, 0, now)
	require.NoError(t, err)
	require.Equal(t, b1.Version, again.Version, "the same content keeps its version")
	require.Equal(t, b1.Signed, again.Signed)

	cfg := Settings{CommandSigningRoots: []string{writePub(t, dir, "next.pub")}}
	c2, err := Content(cfg, a.RootPublic())
	require.NoError(t, err)
	b2, err := Publish(ctx, pool, c2, a, 0, now)
	require.NoError(t, err)
	require.Equal(t, int64(2), b2.Version)
	b3, err := Publish(ctx, pool, c2, a, 10, now)
	require.NoError(t, err)
	require.Equal(t, int64(10), b3.Version, "raised to pki.trustVersion")

	latest, err := Latest(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(10), latest.Version)
	got, _, err := trust.VerifyBundle(latest.GetSigned(), nil, now)
	require.NoError(t, err)
	require.Len(t, got.Roots, 2)
}

func TestContent_ApproversAndThreshold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub, _, err := trust.NewEd25519()
	require.NoError(t, err)
	a1, a2 := writePub(t, dir, "a1.pub"), writePub(t, dir, "a2.pub")
	b, err := Content(Settings{Approvers: []Approver{{Name: "a1", PublicKey: a1}, {Name: "a2", PublicKey: a2}}}, pub)
	require.NoError(t, err)
	require.Equal(t, 2, b.ApprovalThreshold, "all approvers when the threshold is 0")
	_, err = Content(Settings{Approvers: []Approver{{Name: "a1", PublicKey: a1}, {Name: "again", PublicKey: a1}}}, pub)
	require.ErrorContains(t, err, "listed twice")
	_, err = Content(Settings{ApprovalThreshold: 3, Approvers: []Approver{{Name: "a1", PublicKey: a1}}}, pub)
	require.ErrorContains(t, err, "approvalThreshold")
}

// pki.releaseKeys reach the bundle as its release keys, each once; a file
// that is no public key is an error naming the setting.
func TestContent_ReleaseKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub, _, err := trust.NewEd25519()
	require.NoError(t, err)
	r1 := writePub(t, dir, "r1.pub")
	b, err := Content(Settings{ReleaseKeys: []string{r1, r1}}, pub)
	require.NoError(t, err)
	require.Len(t, b.ReleaseKeys, 1)
	want, err := trust.LoadEd25519PublicKey(r1)
	require.NoError(t, err)
	require.Equal(t, want, b.ReleaseKeys[0].PublicKey)
	bad := filepath.Join(dir, "bad.pub")
	require.NoError(t, os.WriteFile(bad, []byte("nope"), 0o644))
	_, err = Content(Settings{ReleaseKeys: []string{bad}}, pub)
	require.ErrorContains(t, err, "pki.releaseKeys")
}
