package bundles

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/minio/minio-go/v7"
)

// Putter is a BlobStore the control plane itself writes to: the history
// archive (controlplane/commands/history) stores its objects and manifests in the
// support-bundle store, with no presigned URL and no node in between. Both
// drivers implement it.
type Putter interface {
	BlobStore
	// Put stores exactly size bytes of body under key, replacing what was
	// there; a reader sees the old object or the new one, never a part.
	Put(ctx context.Context, key string, body io.Reader, size int64) error
}

var (
	_ Putter = (*DirStore)(nil)
	_ Putter = (*S3Store)(nil)
)

// Put writes body through the store's upload directory and renames it into
// place, as an upload through Handler does.
func (s *DirStore) Put(_ context.Context, key string, body io.Reader, size int64) error {
	if size < 0 {
		return fmt.Errorf("put %s: size %d must not be negative", key, size)
	}
	if _, _, err := s.put(key, body, size, size, func(w io.Writer) (io.Writer, func() string) {
		return w, func() string { return "" }
	}); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Put uploads through minio-go: one PUT, or a multipart upload for a large
// body, and either way S3 makes the object visible only once it is whole, so
// a reader sees the old object or the new one, never a part.
func (s *S3Store) Put(ctx context.Context, key string, body io.Reader, size int64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %s: size %d must not be negative", key, size)
	}
	ctx, cancel := context.WithTimeout(ctx, s3RequestTimeout)
	defer cancel()
	if _, err := s.client.PutObject(ctx, s.bucket, key, body, size, minio.PutObjectOptions{}); err != nil {
		return s3Err(http.MethodPut, key, err)
	}
	return nil
}
