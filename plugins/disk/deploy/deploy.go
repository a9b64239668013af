// Package deploy is the deploy kind: it writes an image from a URL to a
// whole disk, decompressing xz or zstd on the fly and hashing the bytes as
// they arrive, so that nothing is staged on the node. It is stricter than
// the image writers it learned from (tinkerbell's image2disk ignores an
// unexpected EOF and checks no digest, so a truncated image "succeeds"): a
// digest is required and must match the bytes served, a body shorter than
// announced or a compressed stream that ends early is refused, and in
// either case the head of the disk is zeroed so that the partial image
// cannot boot. A good image is synced, the kernel re-reads the partition
// table (BLKRRPART), and the whole written span is read back from the
// medium and its SHA-256 compared with what was written.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/better-compute/commands/plugins/disk/blockdev"
)

// Failure reasons deploy reports.
const (
	ReasonRefused        = "device-refused"
	ReasonBadRequest     = "bad-request"
	ReasonDownload       = "download-failed"
	ReasonDigestMismatch = "digest-mismatch"
	ReasonTruncated      = "image-truncated"
	ReasonTooLarge       = "image-too-large"
	ReasonIO             = "io-error"
	ReasonReadback       = "readback-failed"
)

// Error is a deploy failure with its reason.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Request is one deploy.
type Request struct {
	URL    string `json:"url"`
	Device string `json:"device"`
	// SHA256 is the hex SHA-256 of the bytes the URL serves (the
	// compressed file, as `sha256sum image.raw.xz` prints it).
	SHA256 string `json:"sha256"`
	// Compression is auto (by the stream's magic), none, xz or zstd.
	Compression string `json:"compression,omitempty"`
	// Header is added to the image request (an Authorization header whose
	// value came from a secretRef); it is never recorded.
	Header http.Header `json:"-"`
}

// Result is deploy's record.
type Result struct {
	Device blockdev.Identity `json:"device"`
	// Source is the URL without its query and credentials (a presigned
	// URL's signature is a credential).
	Source      string    `json:"source"`
	Compression string    `json:"compression"`
	Downloaded  int64     `json:"downloadedBytes"`
	ImageSHA256 string    `json:"imageSha256"`
	Written     int64     `json:"writtenBytes"`
	WriteSHA256 string    `json:"writtenSha256"`
	Readback    string    `json:"readbackSha256,omitempty"`
	Verified    bool      `json:"verified"`
	Partitions  string    `json:"partitionReread,omitempty"`
	Started     time.Time `json:"startedAt"`
	Finished    time.Time `json:"finishedAt"`
}

// Deps are what a deploy runs on.
type Deps struct {
	Sys      blockdev.Sys
	Client   *http.Client
	Logger   hclog.Logger
	Progress func(percent int, message string)
}

// Run deploys req. On failure the Result holds what is known and the error
// is an *Error.
func Run(ctx context.Context, d Deps, req Request) (Result, error) {
	if d.Sys.SysRoot == "" {
		d.Sys = blockdev.Default
	}
	if d.Client == nil {
		d.Client = &http.Client{Timeout: 0}
	}
	if d.Logger == nil {
		d.Logger = hclog.NewNullLogger()
	}
	if d.Progress == nil {
		d.Progress = func(int, string) {}
	}
	res := Result{Started: time.Now().UTC(), Source: redact(req.URL)}
	err := run(ctx, d, req, &res)
	res.Finished = time.Now().UTC()
	return res, err
}

func run(ctx context.Context, d Deps, req Request, res *Result) error {
	want, err := hex.DecodeString(req.SHA256)
	if err != nil || len(want) != sha256.Size {
		return fail(ReasonBadRequest, "sha256 %q: must be 64 hex digits, the SHA-256 of the file the URL serves", req.SHA256)
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fail(ReasonBadRequest, "url %q: must be an http or https URL", res.Source)
	}
	id, err := d.Sys.Identify(req.Device)
	res.Device = id
	if err != nil {
		return refusedOr(err)
	}
	if err := d.Sys.Check(id); err != nil {
		return refusedOr(err)
	}
	f, err := blockdev.OpenExclusive(req.Device)
	if err != nil {
		return refusedOr(err)
	}
	defer f.Close()
	size, err := blockdev.Size(f)
	if err != nil {
		return fail(ReasonIO, "%w", err)
	}
	res.Device.SizeBytes = size

	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return fail(ReasonBadRequest, "url %q: %w", res.Source, err)
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	resp, err := d.Client.Do(hreq)
	if err != nil {
		return fail(ReasonDownload, "GET %s: %s", res.Source, redactErr(err, req.URL, res.Source))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(ReasonDownload, "GET %s: %s", res.Source, resp.Status)
	}

	raw := &counting{r: resp.Body, h: sha256.New()}
	br := bufio.NewReaderSize(raw, 1<<20)
	comp, err := compression(req.Compression, br)
	if err != nil {
		return err
	}
	res.Compression = comp
	var img io.Reader = br
	switch comp {
	case "xz":
		xr, err := xz.NewReader(br)
		if err != nil {
			return fail(classify(err), "xz header: %w", err)
		}
		img = xr
	case "zstd":
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(1<<30))
		if err != nil {
			return fail(ReasonIO, "zstd: %w", err)
		}
		defer zr.Close()
		img = zr
	}

	wh := sha256.New()
	w := &deviceWriter{f: f, size: size, h: wh, progress: d.Progress, total: resp.ContentLength, raw: raw}
	_, copyErr := io.CopyBuffer(w, img, make([]byte, 4<<20))
	if copyErr == nil {
		// The decompressor stopped at its stream's end: what follows must
		// be nothing (or padding the digest covers), read to hash it all.
		_, copyErr = io.Copy(io.Discard, br)
	}
	res.Downloaded, res.ImageSHA256 = raw.n, hex.EncodeToString(raw.h.Sum(nil))
	res.Written, res.WriteSHA256 = w.n, hex.EncodeToString(wh.Sum(nil))
	bad := func(e *Error) error {
		// The disk holds part of an image nobody vouched for: zero its
		// head so that it cannot boot or be mounted by mistake.
		if zerr := zeroHead(f, min(w.n, 1<<20)); zerr != nil {
			e.Err = fmt.Errorf("%w; and zeroing the partial image's head failed: %w", e.Err, zerr)
		} else if w.n > 0 {
			e.Err = fmt.Errorf("%w; the first %d bytes written were zeroed again so the partial image cannot boot", e.Err, min(w.n, 1<<20))
		}
		return e
	}
	if copyErr != nil {
		var we *Error
		if errors.As(copyErr, &we) {
			return bad(we)
		}
		return bad(fail(classify(copyErr), "after %d bytes served, %d written: %w", raw.n, w.n, copyErr))
	}
	if resp.ContentLength >= 0 && raw.n != resp.ContentLength {
		return bad(fail(ReasonTruncated, "the server announced %d bytes and sent %d", resp.ContentLength, raw.n))
	}
	if !bytes.Equal(raw.h.Sum(nil), want) {
		return bad(fail(ReasonDigestMismatch, "the image served has SHA-256 %s, the command expects %s", res.ImageSHA256, req.SHA256))
	}
	if err := f.Sync(); err != nil {
		return fail(ReasonIO, "sync: %w", err)
	}
	if err := blockdev.RereadPartitions(f); err != nil {
		res.Partitions = err.Error()
		if !errors.Is(err, unix.EINVAL) {
			return fail(ReasonIO, "%w", err)
		}
	} else {
		res.Partitions = "ok"
	}
	if err := blockdev.DropCache(f); err != nil {
		return fail(ReasonIO, "%w", err)
	}
	rh := sha256.New()
	if _, err := io.CopyBuffer(rh, io.NewSectionReader(f, 0, w.n), make([]byte, 4<<20)); err != nil {
		return fail(ReasonReadback, "reading back %d bytes: %w", w.n, err)
	}
	res.Readback = hex.EncodeToString(rh.Sum(nil))
	if res.Readback != res.WriteSHA256 {
		return fail(ReasonReadback, "the disk reads back SHA-256 %s over %d bytes; %s was written", res.Readback, w.n, res.WriteSHA256)
	}
	res.Verified = true
	return nil
}

// compression resolves auto by the stream's magic bytes.
func compression(asked string, br *bufio.Reader) (string, error) {
	switch asked {
	case "none", "xz", "zstd":
		return asked, nil
	case "", "auto":
	default:
		return "", fail(ReasonBadRequest, "compression %q: must be auto, none, xz or zstd", asked)
	}
	magic, err := br.Peek(6)
	if err != nil && len(magic) == 0 {
		if errors.Is(err, io.EOF) {
			return "", fail(ReasonTruncated, "the server sent an empty image")
		}
		return "", fail(classify(err), "reading the image: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		return "xz", nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd", nil
	}
	return "none", nil
}

// classify names a read error: an early end is a truncated image.
func classify(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "unexpected EOF") {
		return ReasonTruncated
	}
	var de *Error
	if errors.As(err, &de) {
		return de.Reason
	}
	return ReasonDownload
}

func refusedOr(err error) error {
	if errors.Is(err, blockdev.ErrRefused) {
		return &Error{Reason: ReasonRefused, Err: err}
	}
	return &Error{Reason: ReasonIO, Err: err}
}

func zeroHead(f *os.File, n int64) error {
	if n <= 0 {
		return nil
	}
	if _, err := f.WriteAt(make([]byte, n), 0); err != nil {
		return err
	}
	return f.Sync()
}

// redact drops a URL's user info and query (a presigned signature).
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func redactErr(err error, full, safe string) string {
	return strings.ReplaceAll(err.Error(), full, safe)
}

// counting hashes and counts the bytes as served.
type counting struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.h.Write(p[:n])
	return n, err
}

// deviceWriter writes the image sequentially, hashing what it writes and
// refusing to run past the device's end.
type deviceWriter struct {
	f        *os.File
	size     int64
	n        int64
	h        hash.Hash
	raw      *counting
	total    int64
	progress func(int, string)
	last     time.Time
}

func (w *deviceWriter) Write(p []byte) (int, error) {
	if w.n+int64(len(p)) > w.size {
		return 0, fail(ReasonTooLarge, "the image is larger than %s (%d bytes)", w.f.Name(), w.size)
	}
	m, err := w.f.WriteAt(p, w.n)
	w.h.Write(p[:m])
	w.n += int64(m)
	if err != nil {
		return m, fail(ReasonIO, "writing at %d: %w", w.n, err)
	}
	if time.Since(w.last) > time.Second {
		w.last = time.Now()
		pct := -1
		if w.total > 0 {
			pct = int(w.raw.n * 100 / w.total)
		}
		w.progress(pct, fmt.Sprintf("written %d bytes", w.n))
	}
	return m, nil
}
