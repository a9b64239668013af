package bundles_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

// Both drivers store what Put is given, replace it on a second Put, and a
// body shorter than its declared size leaves the old object in place.
func TestPutReplacesWholeObjects(t *testing.T) {
	s3 := newS3(t, true).store
	dir, err := bundles.NewDirStore(bundles.DirOptions{Root: t.TempDir(), BaseURL: "http://127.0.0.1/v1/blobs", Secret: bytes.Repeat([]byte("k"), 32)})
	require.NoError(t, err)
	for name, store := range map[string]bundles.Putter{"dir": dir, "s3": s3} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const key = "history/t1/manifest.json"
			require.NoError(t, store.Put(ctx, key, strings.NewReader("first"), 5))
			require.NoError(t, store.Put(ctx, key, strings.NewReader("second"), 6))
			r, info, err := store.Open(ctx, key)
			require.NoError(t, err)
			got, err := io.ReadAll(r)
			require.NoError(t, err)
			require.NoError(t, r.Close())
			require.Equal(t, "second", string(got))
			require.EqualValues(t, 6, info.Size)
			require.ErrorIs(t, store.Put(ctx, "../escape", strings.NewReader("x"), 1), bundles.ErrInvalidKey)
			require.Error(t, store.Put(ctx, "history/t1/negative", strings.NewReader(""), -1))

			require.Error(t, store.Put(ctx, key, strings.NewReader("cut"), 10))
			r, _, err = store.Open(ctx, key)
			require.NoError(t, err)
			got, err = io.ReadAll(r)
			require.NoError(t, err)
			require.NoError(t, r.Close())
			require.Equal(t, "second", string(got), "a short body leaves the old object")
		})
	}
}
