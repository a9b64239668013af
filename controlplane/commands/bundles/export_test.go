package bundles

import "net/http"

// NewS3StoreWithTransport is NewS3Store with its own requests sent through
// rt, since the tests' S3 server speaks TLS with a certificate of its own,
// and tried once, so that a request meant to fail fails at once instead of
// after minio-go's ten tries and their backoff.
func NewS3StoreWithTransport(cfg S3Config, rt http.RoundTripper) (*S3Store, error) {
	return newS3Store(cfg, rt, 1)
}
