package trust

import (
	"crypto/ed25519"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func releaseFixture(t testing.TB) (Release, ed25519.PrivateKey, *Bundle) {
	_, key, err := NewEd25519()
	require.NoError(t, err)
	r := Release{Version: "1.4.0", SHA256: strings.Repeat("ab", 32), Size: 1234, IssuedAt: time.Unix(1700000000, 0).UTC()}
	b := &Bundle{Version: 3, ReleaseKeys: []Root{{PublicKey: key.Public().(ed25519.PublicKey)}}}
	return r, key, b
}

// "a release signature that the node verifies against a release key in its
// trust bundle (refused when unsigned or wrong, whatever the gateway says)".
func TestVerifyRelease_SignedByAReleaseKeyOfTheBundle(t *testing.T) {
	r, key, b := releaseFixture(t)
	wire, err := SignRelease(r, key)
	require.NoError(t, err)
	got, err := VerifyRelease(b, wire, time.Now())
	require.NoError(t, err)
	require.Equal(t, r, got)

	// Another key: refused, naming why.
	_, other, _ := NewEd25519()
	bad, err := SignRelease(r, other)
	require.NoError(t, err)
	_, err = VerifyRelease(b, bad, time.Now())
	require.ErrorIs(t, err, ErrUnknownKey)

	// A bundle without release keys refuses every release.
	_, err = VerifyRelease(&Bundle{Version: 1}, wire, time.Now())
	require.ErrorIs(t, err, ErrNoReleaseKey)

	// A command-signing root is not a release key: purposes are separate.
	rootSigned, err := SignBundle(Bundle{Version: 1}, key)
	require.NoError(t, err)
	_, err = VerifyRelease(b, rootSigned, time.Now())
	require.ErrorIs(t, err, ErrMalformed)

	// A release key outside its window is refused.
	b.ReleaseKeys[0].NotAfter = time.Now().Add(-time.Hour)
	_, err = VerifyRelease(b, wire, time.Now())
	require.ErrorIs(t, err, ErrExpired)
}

// A signature made for the release purpose over a changed body fails:
// the verifier never re-marshals what it got.
func TestVerifyRelease_TamperedBodyFails(t *testing.T) {
	r, key, b := releaseFixture(t)
	wire, err := SignRelease(r, key)
	require.NoError(t, err)
	_, s, err := DecodeRelease(wire)
	require.NoError(t, err)
	s.Body = []byte(strings.Replace(string(s.Body), `"1.4.0"`, `"9.9.9"`, 1))
	_, err = VerifyRelease(b, s.Encode(), time.Now())
	require.ErrorIs(t, err, ErrBadSignature)
}

func TestDecodeRelease_RefusesWhatIsNotARelease(t *testing.T) {
	_, key, _ := releaseFixture(t)
	for name, r := range map[string]Release{
		"no version": {SHA256: strings.Repeat("ab", 32), Size: 1},
		"short sha":  {Version: "1", SHA256: "abcd", Size: 1},
		"no size":    {Version: "1", SHA256: strings.Repeat("ab", 32)},
	} {
		wire, err := SignRelease(r, key)
		require.NoError(t, err)
		_, _, err = DecodeRelease(wire)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
}

// A bundle whose release key is not an Ed25519 key is malformed.
func TestDecodeBundle_ReleaseKeyMustBeEd25519(t *testing.T) {
	_, key, _ := releaseFixture(t)
	wire, err := SignBundle(Bundle{Version: 1, Roots: []Root{{PublicKey: key.Public().(ed25519.PublicKey)}}, ReleaseKeys: []Root{{PublicKey: []byte("short")}}}, key)
	require.NoError(t, err)
	_, _, err = DecodeBundle(wire)
	require.ErrorIs(t, err, ErrMalformed)
	require.Contains(t, err.Error(), "release key 0")
}

func FuzzDecodeRelease(f *testing.F) {
	r, key, _ := releaseFixture(f)
	wire, err := SignRelease(r, key)
	require.NoError(f, err)
	f.Add(wire)
	f.Fuzz(func(t *testing.T, in []byte) {
		rel, _, err := DecodeRelease(in)
		if err != nil {
			return
		}
		if d, err := hex.DecodeString(rel.SHA256); err != nil || len(d) != 32 || rel.Size <= 0 || rel.Version == "" {
			t.Fatalf("decoded an invalid release: %+v", rel)
		}
	})
}
