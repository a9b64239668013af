package bundles_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

// "support-bundles/{nodeId}/{key}.bundle (key is the queue's api:…
// idempotency key derived from yours, without the api: prefix)"
func TestSupportBundleKey(t *testing.T) {
	require.Equal(t, "support-bundles/node_1/tenant_1:logs-0412.bundle", bundles.SupportBundleKey("node_1", "api:tenant_1:logs-0412"))
	require.Equal(t, "support-bundles/node_1/logs-0412.bundle", bundles.SupportBundleKey("node_1", "logs-0412"))
}

// "valid until the command's not_after plus 15 minutes, with a byte cap
// (maxBytes, default 256 MiB) and supportBundle: true"
func TestPresignFields(t *testing.T) {
	e := setupDir(t)
	b := bundles.New(e.store, 0)
	require.Equal(t, bundles.DefaultMaxBytes, b.MaxBytes())
	notAfter := e.clock.now().Add(10 * time.Minute).Truncate(time.Second)

	k, f, err := b.Presign(context.Background(), "node_1", "api:tenant_1:logs-0412", notAfter)
	require.NoError(t, err)
	require.Equal(t, "support-bundles/node_1/tenant_1:logs-0412.bundle", k)
	require.True(t, f.SupportBundle)
	require.Equal(t, int64(256<<20), f.MaxBytes)
	u, err := url.Parse(f.UploadURL)
	require.NoError(t, err)
	exp, err := strconv.ParseInt(u.Query().Get("bc-expires"), 10, 64)
	require.NoError(t, err)
	require.Equal(t, notAfter.Add(15*time.Minute).Unix(), exp)

	// The dir driver's URL is a function of its inputs: presigning again for
	// the same command yields the very same URL.
	_, f2, err := b.Presign(context.Background(), "node_1", "api:tenant_1:logs-0412", notAfter)
	require.NoError(t, err)
	require.Equal(t, f.UploadURL, f2.UploadURL)

	// The URL works until not_after + 15 minutes and not after.
	e.clock.advance(10*time.Minute + 15*time.Minute - time.Second)
	resp, text := put(t, http.MethodPut, f.UploadURL, bytes.NewReader([]byte("b")), 1)
	require.Equal(t, http.StatusOK, resp.StatusCode, text)
	e.clock.advance(time.Second)
	resp, _ = put(t, http.MethodPut, f.UploadURL, bytes.NewReader([]byte("b")), 1)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

}

// "Without supportBundles, logs.collect has no upload destination."
func TestNoDestination(t *testing.T) {
	var b *bundles.Bundles
	_, _, err := b.Presign(context.Background(), "node_1", "k", time.Now().Add(time.Minute))
	require.ErrorIs(t, err, bundles.ErrNoDestination)
	require.Contains(t, err.Error(), "no upload destination")
}

func TestCheck(t *testing.T) {
	e := setupDir(t)
	b := bundles.New(e.store, 100)
	ctx := context.Background()
	upload := func(body []byte) string {
		_, f, err := b.Presign(ctx, "node_1", "k", e.clock.now().Add(time.Minute))
		require.NoError(t, err)
		resp, text := put(t, http.MethodPut, f.UploadURL, bytes.NewReader(body), int64(len(body)))
		require.Equal(t, http.StatusOK, resp.StatusCode, text)
		s := sha256.Sum256(body)
		return hex.EncodeToString(s[:])
	}
	k := bundles.SupportBundleKey("node_1", "k")
	sum := upload([]byte("the bundle"))
	info, err := b.Check(ctx, k, sum)
	require.NoError(t, err)
	require.EqualValues(t, 10, info.Size)

	// Another digest than the node reported: deleted.
	_, err = b.Check(ctx, k, sum[:63]+"0")
	require.ErrorIs(t, err, bundles.ErrDigest)
	_, err = e.store.Stat(ctx, k)
	require.ErrorIs(t, err, bundles.ErrNotFound)

	// Over the cap (as an S3 upload could be): deleted.
	upload([]byte("small"))
	_, err = bundles.New(e.store, 3).Check(ctx, k, sum)
	require.ErrorIs(t, err, bundles.ErrOverCap)
	_, err = e.store.Stat(ctx, k)
	require.ErrorIs(t, err, bundles.ErrNotFound)
}
