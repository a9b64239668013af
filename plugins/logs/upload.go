package logs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// ErrUploadRefused wraps a 4xx answer: the store refused the bundle (an
// expired or forged URL, a body over the cap); retrying will not help.
var ErrUploadRefused = errors.New("the blob store refused the upload")

// uploadAttempts bounds the tries on a network error or a 5xx.
const uploadAttempts = 3

// upload PUTs the file at path, of size bytes, to rawURL with an exact
// Content-Length, reporting progress from lo to hi percent.
func upload(ctx context.Context, client *http.Client, rawURL, path string, size int64, progress kind.Progress, lo, hi int) error {
	var last error
	for attempt := 1; attempt <= uploadAttempts; attempt++ {
		err := uploadOnce(ctx, client, rawURL, path, size, progress, lo, hi)
		if err == nil || errors.Is(err, ErrUploadRefused) || ctx.Err() != nil {
			return err
		}
		last = err
		if attempt < uploadAttempts {
			select {
			case <-time.After(time.Duration(attempt) * time.Second):
			case <-ctx.Done():
				return fmt.Errorf("%w (after: %v)", ctx.Err(), last) //nolint:errorlint // only the cancel is the outcome: wrapping the last attempt's failure would make kind.ResultOf report it instead of cancelled
			}
		}
	}
	return fmt.Errorf("upload failed %d times: %w", uploadAttempts, last)
}

func uploadOnce(ctx context.Context, client *http.Client, rawURL, path string, size int64, progress kind.Progress, lo, hi int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	body := &progressReader{r: f, size: size, progress: progress, lo: lo, hi: hi, last: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rawURL, body)
	if err != nil {
		return fmt.Errorf("upload request: %w", redact(err))
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("uploading to %s: %w", where(rawURL), redact(err))
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return fmt.Errorf("%w: %s answered %s: %s", ErrUploadRefused, where(rawURL), resp.Status, strings.TrimSpace(string(msg)))
	default:
		return fmt.Errorf("uploading to %s: %s: %s", where(rawURL), resp.Status, strings.TrimSpace(string(msg)))
	}
}

// where names the upload's host and path but not its query, which holds the
// signature: a result or a log line must not carry the capability.
func where(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "the upload URL"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// redact strips a *url.Error's URL, which carries the signature.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, where(ue.URL), ue.Err)
	}
	return err
}

// progressReader reports how much of the body was sent, every 5 percent.
type progressReader struct {
	r        io.Reader
	size     int64
	sent     int64
	progress kind.Progress
	lo, hi   int
	last     int
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.sent += int64(n)
	if p.size > 0 && p.progress != nil {
		pct := p.lo + int(int64(p.hi-p.lo)*p.sent/p.size)
		if pct >= p.last+5 || (p.sent == p.size && pct != p.last) {
			p.last = pct
			p.progress.Report(pct, fmt.Sprintf("uploaded %d of %d bytes", p.sent, p.size))
		}
	}
	return n, err
}
