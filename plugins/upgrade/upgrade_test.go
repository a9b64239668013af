package upgrade_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
	iupgrade "github.com/better-compute/commands/internal/upgrade"
	"github.com/better-compute/commands/plugins/upgrade"
	"github.com/better-compute/commands/sdk/kind"
)

// fixture is a node at version 1.0.0 with a trust bundle holding one
// release key, and a server with one package.
type fixture struct {
	cfg     upgrade.Config
	layout  iupgrade.Layout
	release ed25519.PrivateKey
	pkg     []byte
	srv     *httptest.Server
	served  func(w http.ResponseWriter)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{layout: iupgrade.Layout{Root: t.TempDir()}, pkg: []byte(strings.Repeat("package bytes ", 100))}
	_, root, err := trust.NewEd25519()
	require.NoError(t, err)
	_, f.release, err = trust.NewEd25519()
	require.NoError(t, err)
	bundle, err := trust.SignBundle(trust.Bundle{Version: 1, Roots: []trust.Root{{PublicKey: root.Public().(ed25519.PublicKey)}},
		ReleaseKeys: []trust.Root{{PublicKey: f.release.Public().(ed25519.PublicKey)}}}, root)
	require.NoError(t, err)
	state := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(state, "trust.json"), bundle, 0o600))
	require.NoError(t, os.MkdirAll(f.layout.VersionDir("1.0.0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.layout.VersionDir("1.0.0"), iupgrade.DaemonBinary), []byte("#!/bin/false\n"), 0o755))
	require.NoError(t, f.layout.Activate("1.0.0"))
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.served != nil {
			f.served(w)
			return
		}
		_, _ = w.Write(f.pkg)
	}))
	t.Cleanup(f.srv.Close)
	f.cfg = upgrade.Config{StateDir: state, InstallDir: f.layout.Root, BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "no-bus")}
	return f
}

func (f *fixture) sha() string {
	s := sha256.Sum256(f.pkg)
	return hex.EncodeToString(s[:])
}

// payload is an upgrade to v signed by key, with the release edited by rel.
func (f *fixture) payload(t *testing.T, v string, key ed25519.PrivateKey, edit func(*trust.Release, *upgrade.Payload)) upgrade.Payload {
	t.Helper()
	r := trust.Release{Version: v, SHA256: f.sha(), Size: int64(len(f.pkg)), IssuedAt: time.Now().UTC()}
	p := upgrade.Payload{TargetVersion: v, Package: upgrade.Package{URL: f.srv.URL + "/pkg", Size: r.Size, SHA256: r.SHA256}}
	if edit != nil {
		edit(&r, &p)
	}
	wire, err := trust.SignRelease(r, key)
	require.NoError(t, err)
	p.Release = wire
	return p
}

func (f *fixture) run(t *testing.T, p upgrade.Payload) *kind.Failure {
	t.Helper()
	b, err := json.Marshal(p)
	require.NoError(t, err)
	_, err = upgrade.Handler(f.cfg).Handle(context.Background(), kind.Request{Command: kind.Command{ID: "cmd_t", Kind: iupgrade.KindName, Payload: b}})
	var kf *kind.Failure
	require.True(t, errors.As(err, &kf), "a failure, got %v", err)
	return kf
}

// Nothing but a signed, matching release gets as far as the download, and
// none of these refusals leaves anything staged or activated.
func TestRefusals(t *testing.T) {
	f := newFixture(t)
	_, stranger, err := trust.NewEd25519()
	require.NoError(t, err)
	cases := []struct {
		name, reason, words string
		p                   upgrade.Payload
	}{
		{"signed by a key the bundle does not hold", upgrade.ReasonBadRelease, "not trusted", f.payload(t, "1.1.0", stranger, nil)},
		{"unsigned", upgrade.ReasonBadRelease, "no release signature", func() upgrade.Payload {
			p := f.payload(t, "1.1.0", f.release, nil)
			p.Release = nil
			return p
		}()},
		{"the payload names another digest than the signed one", upgrade.ReasonReleaseMismatch, "sha256", f.payload(t, "1.1.0", f.release, func(r *trust.Release, p *upgrade.Payload) {
			p.Package.SHA256 = strings.Repeat("0", 64)
		})},
		{"the payload names another version than the signed one", upgrade.ReasonReleaseMismatch, "version 1.1.0 (payload 1.2.0)", f.payload(t, "1.1.0", f.release, func(r *trust.Release, p *upgrade.Payload) {
			p.TargetVersion = "1.2.0"
		})},
		// "Downgrades are refused unless the payload says so explicitly and is signed for it."
		{"a downgrade not asked for", upgrade.ReasonDowngradeRefused, "does not ask for a downgrade", f.payload(t, "0.9.0", f.release, nil)},
		{"a downgrade asked for but not signed for", upgrade.ReasonDowngradeRefused, "not signed for a downgrade", f.payload(t, "0.9.0", f.release, func(r *trust.Release, p *upgrade.Payload) {
			p.AllowDowngrade = true
		})},
		{"the running version", upgrade.ReasonAlreadyCurrent, "already the active version", f.payload(t, "1.0.0", f.release, nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kf := f.run(t, c.p)
			require.Equal(t, c.reason, kf.Reason, kf.Message)
			require.Contains(t, kf.Message, c.words)
			cur, err := f.layout.CurrentVersion()
			require.NoError(t, err)
			require.Equal(t, "1.0.0", cur)
			entries, err := os.ReadDir(f.layout.Versions())
			require.NoError(t, err)
			require.Len(t, entries, 1, "nothing staged")
		})
	}
}

// A downgrade that both the payload and the release ask for passes the
// version check (and stops later, here at the download).
func TestSignedDowngradePassesTheVersionCheck(t *testing.T) {
	f := newFixture(t)
	f.served = func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }
	kf := f.run(t, f.payload(t, "0.9.0", f.release, func(r *trust.Release, p *upgrade.Payload) {
		r.AllowDowngrade, p.AllowDowngrade = true, true
	}))
	require.Equal(t, upgrade.ReasonDownload, kf.Reason, kf.Message)
}

func TestSkippedTargetIsRefusedUnlessAskedAgain(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.layout.Skip("1.1.0"))
	kf := f.run(t, f.payload(t, "1.1.0", f.release, nil))
	require.Equal(t, upgrade.ReasonTargetSkipped, kf.Reason)
	f.served = func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }
	kf = f.run(t, f.payload(t, "1.1.0", f.release, func(_ *trust.Release, p *upgrade.Payload) { p.RetrySkipped = true }))
	require.Equal(t, upgrade.ReasonDownload, kf.Reason, "retrySkipped gets past the skip list")
}

// "check free disk": a reserve larger than the file system refuses before
// any byte is downloaded.
func TestFreeDiskIsCheckedFirst(t *testing.T) {
	f := newFixture(t)
	f.cfg.ReserveBytes = 1 << 62
	hit := false
	f.served = func(w http.ResponseWriter) { hit = true }
	kf := f.run(t, f.payload(t, "1.1.0", f.release, nil))
	require.Equal(t, upgrade.ReasonDiskFull, kf.Reason)
	require.Contains(t, kf.Message, "bytes free")
	require.False(t, hit, "nothing was downloaded")
}

// "download with a size cap and the digest checked while streaming": a
// server that sends more than the signed size is cut off, one that sends
// other bytes is refused, and neither leaves a file behind.
func TestDownloadCapAndDigest(t *testing.T) {
	f := newFixture(t)
	signed := f.payload(t, "1.1.0", f.release, nil)
	f.served = func(w http.ResponseWriter) {
		w.Header().Set("Content-Length", "") // no announced length: the cap must hold while streaming
		_, _ = w.Write(append(append([]byte(nil), f.pkg...), []byte("more")...))
	}
	kf := f.run(t, signed)
	require.Equal(t, upgrade.ReasonDownload, kf.Reason)
	require.Contains(t, kf.Message, upgrade.ErrTooLarge.Error())

	f.served = func(w http.ResponseWriter) { _, _ = w.Write([]byte(strings.Repeat("X", len(f.pkg)))) }
	kf = f.run(t, signed)
	require.Equal(t, upgrade.ReasonDownload, kf.Reason)
	require.Contains(t, kf.Message, upgrade.ErrDigestMismatch.Error())

	entries, err := os.ReadDir(f.layout.Versions())
	require.NoError(t, err)
	require.Len(t, entries, 1, "no download left behind")
}

// A package that is not a bcd release (no bcd inside) is refused at the
// stage, and nothing is activated.
func TestPackageWithoutBcdIsRefused(t *testing.T) {
	f := newFixture(t)
	f.pkg = []byte("not a tar.gz")
	kf := f.run(t, f.payload(t, "1.1.0", f.release, nil))
	require.Equal(t, upgrade.ReasonBadPackage, kf.Reason, kf.Message)
	cur, err := f.layout.CurrentVersion()
	require.NoError(t, err)
	require.Equal(t, "1.0.0", cur)
}

func TestHelperUnitName(t *testing.T) {
	require.Equal(t, "bcd-upgrade-cmd_01H_x_y.service", upgrade.HelperUnit("cmd_01H/x.y"))
}

// An entry that would land outside the staging directory is refused.
func TestPackageEntryOutsideIsRefused(t *testing.T) {
	f := newFixture(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "../../escaped", Mode: 0o755, Size: 1, Typeflag: tar.TypeReg}))
	_, _ = tw.Write([]byte("x"))
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	f.pkg = buf.Bytes()
	kf := f.run(t, f.payload(t, "1.1.0", f.release, nil))
	require.Equal(t, upgrade.ReasonBadPackage, kf.Reason)
	require.Contains(t, kf.Message, "leaves the package")
	require.NoFileExists(t, filepath.Join(filepath.Dir(f.layout.Root), "escaped"))
}
