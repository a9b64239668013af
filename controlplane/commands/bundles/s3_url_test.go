package bundles

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The URLs' shape: virtual-hosted on the configured endpoint unless path
// style, the key's colon encoded, the lifetime counted from the store's
// clock, only the host signed, the session token in the query and the
// secret nowhere; and SigV4's bounds on the lifetime.
func TestS3StoreURLs(t *testing.T) {
	now := time.Date(2026, 4, 12, 10, 0, 0, 0, time.UTC)
	s, err := NewS3Store(S3Config{Endpoint: "https://s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "bundles", AccessKeyID: "AKID", SecretAccessKey: "secret", SessionToken: "tok"})
	require.NoError(t, err)
	s.now = func() time.Time { return now }

	p, err := s.PresignPut(t.Context(), "support-bundles/node_1/tenant_1:k.bundle", now.Add(25*time.Minute), 1<<20)
	require.NoError(t, err)
	require.Equal(t, now.Add(25*time.Minute), p.Expires)
	require.EqualValues(t, 1<<20, p.MaxBytes)
	require.Equal(t, "PUT", p.Method)
	u, err := url.Parse(p.URL)
	require.NoError(t, err)
	require.Equal(t, "https", u.Scheme)
	require.Equal(t, "bundles.s3.eu-west-1.amazonaws.com", u.Host)
	require.Equal(t, "/support-bundles/node_1/tenant_1%3Ak.bundle", u.EscapedPath(), "SigV4 encodes the key's colon")
	q := u.Query()
	require.Equal(t, "AWS4-HMAC-SHA256", q.Get("X-Amz-Algorithm"))
	require.Equal(t, "1500", q.Get("X-Amz-Expires"))
	require.Equal(t, "host", q.Get("X-Amz-SignedHeaders"))
	require.Contains(t, q.Get("X-Amz-Credential"), "AKID/")
	require.Contains(t, q.Get("X-Amz-Credential"), "/eu-west-1/s3/aws4_request")
	require.Equal(t, "tok", q.Get("X-Amz-Security-Token"))
	require.NotContains(t, p.URL, "secret", "no credential travels in the URL")
	require.Len(t, q.Get("X-Amz-Signature"), 64)

	// MinIO and buckets with dots: path style.
	s, err = NewS3Store(S3Config{Endpoint: "http://minio.local:9000", Region: "us-east-1", Bucket: "bundles", PathStyle: true, AccessKeyID: "AKID", SecretAccessKey: "secret"})
	require.NoError(t, err)
	s.now = func() time.Time { return now }
	g, err := s.PresignGet(t.Context(), "a b", now.Add(time.Minute))
	require.NoError(t, err)
	require.Contains(t, g, "http://minio.local:9000/bundles/a%20b?")

	// Virtual-hosted on a non-AWS endpoint.
	s, err = NewS3Store(S3Config{Endpoint: "https://rgw.example.com", Region: "us-east-1", Bucket: "bundles", AccessKeyID: "AKID", SecretAccessKey: "secret"})
	require.NoError(t, err)
	s.now = func() time.Time { return now }
	g, err = s.PresignGet(t.Context(), "k", now.Add(time.Minute))
	require.NoError(t, err)
	require.Contains(t, g, "https://bundles.rgw.example.com/k?")

	_, err = s.PresignPut(t.Context(), "k", now.Add(8*24*time.Hour), 1)
	require.ErrorIs(t, err, ErrExpiry)
	_, err = s.PresignPut(t.Context(), "k", now, 1)
	require.ErrorIs(t, err, ErrExpiry)
	_, err = s.PresignGet(t.Context(), "k", now.Add(-time.Hour))
	require.ErrorIs(t, err, ErrExpiry)
	_, err = s.PresignPut(t.Context(), "k", now.Add(time.Hour), 0)
	require.Error(t, err)
	_, err = s.PresignPut(t.Context(), "k", now.Add(maxS3Expiry), 1)
	require.NoError(t, err, "exactly 7 days is allowed")
}
