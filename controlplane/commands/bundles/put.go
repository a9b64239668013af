package bundles

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
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

// Put sends a presigned PUT with the body's length: S3 replaces an object
// atomically, so a reader never sees a part of it.
func (s *S3Store) Put(ctx context.Context, key string, body io.Reader, size int64) error {
	u, err := s.presign(http.MethodPut, key, s.now().Add(5*time.Minute))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, io.NopCloser(body))
	if err != nil {
		return fmt.Errorf("s3 PUT %s: %w", key, err)
	}
	req.ContentLength = size
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("s3 PUT %s: %w", key, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return statusErr(http.MethodPut, key, resp)
	}
	return nil
}
