package archive_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/commands/history/archive"
)

// memSource serves one object from memory.
type memSource map[string][]byte

func (m memSource) Open(_ context.Context, key string) (io.ReadCloser, bundles.ObjectInfo, error) {
	b, ok := m[key]
	if !ok {
		return nil, bundles.ObjectInfo{}, bundles.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), bundles.ObjectInfo{Key: key, Size: int64(len(b))}, nil
}

var hour = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

func lines(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, l := range s {
		out[i] = []byte(l)
	}
	return out
}

// An object written from a directory copy reads back line for line, and a
// byte changed after the manifest was written is an integrity error, not
// rows read as if nothing happened.
func TestAnObjectReadsBackAndATamperedOneIsRefused(t *testing.T) {
	in := lines(`{"type":"command","row":{"id":"c1"}}`, `{"type":"event","row":{"id":1}}`)
	body, sum, err := archive.EncodeObject(in)
	require.NoError(t, err)
	again, sum2, err := archive.EncodeObject(in)
	require.NoError(t, err)
	require.Equal(t, body, again, "the same lines make the same bytes, so a rerun of an hour rewrites the same object")
	require.Equal(t, sum, sum2)

	dir := t.TempDir()
	key := archive.ObjectKey("acme", hour)
	path := filepath.Join(dir, filepath.FromSlash(key))
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, body, 0o644))
	e := archive.ObjectEntry{Key: key, Hour: hour, Bytes: int64(len(body)), SHA256: sum}

	got, err := archive.ReadObject(context.Background(), archive.DirSource(dir), e)
	require.NoError(t, err)
	require.Equal(t, in, got)

	body[len(body)/2] ^= 0xff
	require.NoError(t, os.WriteFile(path, body, 0o644))
	_, err = archive.ReadObject(context.Background(), archive.DirSource(dir), e)
	require.ErrorIs(t, err, archive.ErrIntegrity)
	require.ErrorContains(t, err, "the manifest says")
}

// A line that is not a record is refused with its line number.
func TestALineThatIsNotARecordIsNamed(t *testing.T) {
	body, _, err := archive.EncodeObject(lines(`{"type":"command","row":{}}`, `{"row":{}}`))
	require.NoError(t, err)
	_, err = archive.ReadObject(context.Background(), memSource{"k": body}, archive.ObjectEntry{Key: "k"})
	require.ErrorIs(t, err, archive.ErrIntegrity)
	require.ErrorContains(t, err, "line 2")
}

// FuzzReadObject feeds ReadObject arbitrary bytes as an object (its
// manifest's digest skipped, as for an object a crash left unnamed): it
// must never panic, and what it returns without an error is records.
func FuzzReadObject(f *testing.F) {
	good, _, err := archive.EncodeObject(lines(`{"type":"command","row":{"id":"c1"}}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte("not zstd"))
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := archive.ReadObject(context.Background(), memSource{"k": body}, archive.ObjectEntry{Key: "k"})
		if err != nil {
			return
		}
		for _, l := range got {
			again, _, err := archive.EncodeObject([][]byte{l})
			require.NoError(t, err)
			back, err := archive.ReadObject(context.Background(), memSource{"k": again}, archive.ObjectEntry{Key: "k"})
			require.NoError(t, err, "a line read back once reads back again")
			require.Equal(t, [][]byte{l}, back)
		}
	})
}

// FuzzReadManifest: a manifest that does not parse, or that names another
// tenant than the directory it is in, is an integrity error, never a panic.
func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(`{"tenant":"acme","objects":[{"key":"history/acme/2026/01/02/03.jsonl.zst","hour":"2026-01-02T03:00:00Z","commands":1,"bytes":10,"sha256":"00"}]}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"tenant":"other","objects":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := archive.ReadManifest(context.Background(), memSource{archive.ManifestKey("acme"): body}, "acme")
		if err != nil {
			require.True(t, errors.Is(err, archive.ErrIntegrity), "a bad manifest is an integrity error: %v", err)
			return
		}
		require.Equal(t, "acme", m.Tenant, "a manifest read without an error is the asked tenant's")
	})
}

// The digest check is what makes a copied-down archive trustworthy: this
// pins that the SHA-256 in an entry is the hex of the object's bytes.
func TestTheManifestDigestIsTheObjectsSHA256(t *testing.T) {
	body, sum, err := archive.EncodeObject(lines(`{"type":"job","row":{}}`))
	require.NoError(t, err)
	want := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(want[:]), sum)
}
