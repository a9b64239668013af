package bundles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// uploadsDir holds uploads in flight under a DirStore's root; an upload is
// renamed into place only once complete and within its cap.
const uploadsDir = ".bc-uploads"

// minSecret is the shortest HMAC key a DirStore accepts.
const minSecret = 32

// maxDirExpiry bounds how far ahead a DirStore URL may expire.
const maxDirExpiry = 7 * 24 * time.Hour

// DirOptions configure a DirStore.
type DirOptions struct {
	// Root is the directory holding the objects; it is created.
	Root string
	// BaseURL is the external URL at which Handler is served.
	BaseURL string
	// Secret is the HMAC key, at least 32 bytes, shared by every replica.
	Secret []byte
	// Logger logs refusals; nil discards.
	Logger hclog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DirStore is a BlobStore in a directory that the control plane serves
// itself through Handler. Its URLs carry an HMAC-SHA256 over the method, the
// key, the deadline and the byte cap.
type DirStore struct {
	root   string
	base   *url.URL
	secret []byte
	logger hclog.Logger
	now    func() time.Time
}

var _ BlobStore = (*DirStore)(nil)

// NewDirStore creates the directory and returns the store.
func NewDirStore(o DirOptions) (*DirStore, error) {
	if o.Root == "" {
		return nil, errors.New("dir store: root is required")
	}
	if len(o.Secret) < minSecret {
		return nil, fmt.Errorf("dir store: secret must be at least %d bytes", minSecret)
	}
	base, err := url.Parse(strings.TrimSuffix(o.BaseURL, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("dir store: baseURL %q must be an absolute URL", o.BaseURL)
	}
	if err := os.MkdirAll(filepath.Join(o.Root, uploadsDir), 0o750); err != nil {
		return nil, fmt.Errorf("dir store: %w", err)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &DirStore{root: o.Root, base: base, secret: append([]byte(nil), o.Secret...), logger: o.Logger.Named("blobstore"), now: o.Now}, nil
}

// MountPath is the URL path under which the control plane must route
// requests to Handler (the path of BaseURL).
func (s *DirStore) MountPath() string { return s.base.Path }

func (s *DirStore) objectURL(key string, q url.Values) string {
	u := *s.base
	u.Path = s.base.Path + "/" + key
	u.RawPath = s.base.EscapedPath() + "/" + escapeKey(key)
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *DirStore) checkExpiry(expires time.Time) error {
	now := s.now()
	if !expires.After(now) {
		return fmt.Errorf("%w: %s is not in the future", ErrExpiry, expires.Format(time.RFC3339))
	}
	if expires.Sub(now) > maxDirExpiry {
		return fmt.Errorf("%w: %s is more than %s ahead", ErrExpiry, expires.Format(time.RFC3339), maxDirExpiry)
	}
	return nil
}

// PresignPut signs a PUT of at most maxBytes to key until expires.
func (s *DirStore) PresignPut(_ context.Context, key string, expires time.Time, maxBytes int64) (PresignedPut, error) {
	if err := CheckKey(key); err != nil {
		return PresignedPut{}, err
	}
	if err := s.checkExpiry(expires); err != nil {
		return PresignedPut{}, err
	}
	if maxBytes <= 0 {
		return PresignedPut{}, fmt.Errorf("presign %s: maxBytes %d must be positive", key, maxBytes)
	}
	expires = expires.Truncate(time.Second)
	q := signedQuery(s.secret, http.MethodPut, key, expires, maxBytes)
	return PresignedPut{URL: s.objectURL(key, q), Method: http.MethodPut, Expires: expires, MaxBytes: maxBytes}, nil
}

// PresignGet signs a GET (or HEAD) of key until expires.
func (s *DirStore) PresignGet(_ context.Context, key string, expires time.Time) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if err := s.checkExpiry(expires); err != nil {
		return "", err
	}
	expires = expires.Truncate(time.Second)
	return s.objectURL(key, signedQuery(s.secret, http.MethodGet, key, expires, 0)), nil
}

func (s *DirStore) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// Stat describes key.
func (s *DirStore) Stat(_ context.Context, key string) (ObjectInfo, error) {
	p, err := s.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ObjectInfo{}, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return ObjectInfo{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime().UTC()}, nil
}

// Open reads key.
func (s *DirStore) Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	p, _ := s.path(key)
	f, err := os.Open(p)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("open %s: %w", key, err)
	}
	return f, info, nil
}

// Delete removes key.
func (s *DirStore) Delete(_ context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// put streams body into key, at most maxBytes, through a temporary file that
// is renamed into place only when the whole body arrived within the cap. It
// returns the size and the SHA-256 of what was stored.
func (s *DirStore) put(key string, body io.Reader, declared, maxBytes int64, sum func(io.Writer) (io.Writer, func() string)) (int64, string, error) {
	final, err := s.path(key)
	if err != nil {
		return 0, "", err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(s.root, uploadsDir, hex.EncodeToString(rnd[:])+".part")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640) //nolint:gosec // bundles are served to operators by bc-server and read by its backups
	if err != nil {
		return 0, "", fmt.Errorf("creating upload file: %w", err)
	}
	// Whatever goes wrong below, nothing partial stays behind.
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	w, digest := sum(f)
	// One byte past the cap tells an oversize body from one exactly at it.
	n, err := io.Copy(w, io.LimitReader(body, maxBytes+1))
	if err != nil {
		return n, "", fmt.Errorf("%w: reading the body after %d bytes: %w", errCutOff, n, err)
	}
	if n > maxBytes {
		return n, "", fmt.Errorf("%w: more than %d bytes", errTooLarge, maxBytes)
	}
	if declared >= 0 && n != declared {
		return n, "", fmt.Errorf("%w: got %d of the %d bytes declared", errCutOff, n, declared)
	}
	if err := f.Sync(); err != nil {
		return n, "", fmt.Errorf("sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return n, "", fmt.Errorf("close: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o750); err != nil {
		return n, "", fmt.Errorf("mkdir: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return n, "", fmt.Errorf("rename into place: %w", err)
	}
	keep = true
	return n, digest(), nil
}

// escapeKey escapes each segment of key for a URL path.
func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
