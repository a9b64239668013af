package bundles

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// AWS's published example of a presigned URL ("Authenticating Requests:
// Using Query Parameters (AWS Signature Version 4)", GET Object):
// examplebucket/test.txt, us-east-1, 2013-05-24T00:00:00Z, 86400 seconds.
func TestSigV4MatchesAWSExample(t *testing.T) {
	u, _ := url.Parse("https://examplebucket.s3.amazonaws.com/test.txt")
	got := presignV4("GET", u, "us-east-1", sigV4Credentials{
		AccessKeyID:     "AKIAIOSFODNN7EXAMPLE",
		SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	}, time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC), 86400*time.Second)
	require.Equal(t, "https://examplebucket.s3.amazonaws.com/test.txt"+
		"?X-Amz-Algorithm=AWS4-HMAC-SHA256"+
		"&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"+
		"&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"+
		"&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404", got)
}

func TestS3StoreURLs(t *testing.T) {
	now := time.Date(2026, 4, 12, 10, 0, 0, 0, time.UTC)
	s, err := NewS3Store(S3Config{Endpoint: "https://s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "bundles", AccessKeyID: "AKID", SecretAccessKey: "secret"})
	require.NoError(t, err)
	s.now = func() time.Time { return now }

	p, err := s.PresignPut(t.Context(), "support-bundles/node_1/tenant_1:k.bundle", now.Add(25*time.Minute), 1<<20)
	require.NoError(t, err)
	u, err := url.Parse(p.URL)
	require.NoError(t, err)
	require.Equal(t, "bundles.s3.eu-west-1.amazonaws.com", u.Host)
	require.Equal(t, "/support-bundles/node_1/tenant_1%3Ak.bundle", u.EscapedPath(), "SigV4 encodes the key's colon")
	require.Equal(t, "1500", u.Query().Get("X-Amz-Expires"))
	require.Equal(t, "host", u.Query().Get("X-Amz-SignedHeaders"))
	require.NotContains(t, p.URL, "secret", "no credential travels in the URL")
	require.Len(t, u.Query().Get("X-Amz-Signature"), 64)

	// MinIO and buckets with dots: path style.
	s.cfg.PathStyle = true
	s.endpoint, _ = url.Parse("http://minio.local:9000")
	g, err := s.PresignGet(t.Context(), "a b", now.Add(time.Minute))
	require.NoError(t, err)
	require.Contains(t, g, "http://minio.local:9000/bundles/a%20b?")

	_, err = s.PresignPut(t.Context(), "k", now.Add(8*24*time.Hour), 1)
	require.ErrorIs(t, err, ErrExpiry)
	_, err = s.PresignPut(t.Context(), "k", now, 1)
	require.ErrorIs(t, err, ErrExpiry)
}
