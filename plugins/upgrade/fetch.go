package upgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
)

// Errors of the download.
var (
	ErrTooLarge       = errors.New("the package is larger than its signed size")
	ErrDigestMismatch = errors.New("the package's SHA-256 is not the signed one")
)

// fetch downloads src into dst, reading at most size+1 bytes and hashing
// while it streams: a package larger than size stops the download at the
// first byte too many, and one whose digest differs is removed. file://
// URLs read a local file (a package an operator placed).
func fetch(ctx context.Context, src string, size int64, sha string, dst string) error {
	u, err := url.Parse(src)
	if err != nil {
		return fmt.Errorf("package url: %w", err)
	}
	var body io.ReadCloser
	switch u.Scheme {
	case "file":
		f, err := os.Open(u.Path)
		if err != nil {
			return fmt.Errorf("opening the package: %w", err)
		}
		body = f
	case "http", "https":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
		if err != nil {
			return fmt.Errorf("package url: %w", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("downloading the package: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			return fmt.Errorf("downloading the package: %s answered %s", u.Host, resp.Status)
		}
		if resp.ContentLength > size {
			_ = resp.Body.Close()
			return fmt.Errorf("%w: the server announces %d bytes, the release %d", ErrTooLarge, resp.ContentLength, size)
		}
		body = resp.Body
	default:
		return fmt.Errorf("package url %s: scheme %q is not http, https or file", src, u.Scheme)
	}
	defer body.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(&ctxReader{ctx: ctx, r: body}, size+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		_ = os.Remove(dst)
		return fmt.Errorf("downloading the package: %w", err)
	case n > size:
		_ = os.Remove(dst)
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, size)
	case n < size:
		_ = os.Remove(dst)
		return fmt.Errorf("downloading the package: %d bytes, the release says %d", n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		_ = os.Remove(dst)
		return fmt.Errorf("%w: got %s, signed %s", ErrDigestMismatch, got, sha)
	}
	return nil
}

// ctxReader stops a copy once ctx ends (a cancel between reads).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
