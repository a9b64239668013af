package bundles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxS3Expiry is SigV4's longest presigned lifetime: 7 days.
const maxS3Expiry = 7 * 24 * time.Hour

// S3Config configures an S3Store.
type S3Config struct {
	// Endpoint is the service URL: "https://s3.eu-west-1.amazonaws.com", or
	// a MinIO or Ceph RGW address.
	Endpoint string `json:"endpoint" yaml:"endpoint"`
	// Region is the SigV4 region ("us-east-1" for most S3-compatible stores).
	Region string `json:"region" yaml:"region"`
	// Bucket holds the bundles.
	Bucket string `json:"bucket" yaml:"bucket"`
	// PathStyle puts the bucket in the path (MinIO, buckets with dots)
	// instead of the host name.
	PathStyle bool `json:"pathStyle,omitempty" yaml:"pathStyle,omitempty"`
	// AccessKeyID and SecretAccessKey sign the URLs; they stay in the
	// control plane. SessionToken is for temporary credentials.
	AccessKeyID     string `json:"accessKeyId" yaml:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey" yaml:"secretAccessKey"`
	SessionToken    string `json:"sessionToken,omitempty" yaml:"sessionToken,omitempty"`
}

// S3Store is a BlobStore in an S3-compatible bucket, with SigV4 presigned
// URLs computed here (no SDK: the control plane needs only query signing).
//
// How the byte cap holds: S3 cannot cap a presigned PUT. A POST policy's
// content-length-range can, but makes the upload a multipart form; a
// Content-Length signed into the URL pins an exact size, which the control
// plane does not know when it presigns at enqueue, before the node has
// collected anything. So the URL signs the method, the key and the deadline
// (X-Amz-Expires, at most 7 days), and the cap holds in two other places:
// the daemon truncates the bundle to maxBytes before it uploads, and the
// control plane checks the stored object when the result lands (Check):
// an object over the cap, or whose SHA-256 is not the one the node
// reported, is deleted and the check fails. The URL travels only inside the
// signed command.
type S3Store struct {
	cfg      S3Config
	endpoint *url.URL
	client   *http.Client
	now      func() time.Time
}

var _ BlobStore = (*S3Store)(nil)

// NewS3Store checks cfg and returns the store.
func NewS3Store(cfg S3Config) (*S3Store, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.Endpoint, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("s3 store: endpoint %q must be an http(s) URL", cfg.Endpoint)
	}
	if cfg.Bucket == "" || cfg.Region == "" || cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, errors.New("s3 store: bucket, region, accessKeyId and secretAccessKey are required")
	}
	return &S3Store{cfg: cfg, endpoint: u, client: &http.Client{Timeout: 5 * time.Minute}, now: time.Now}, nil
}

// objectURL is the unsigned URL of key, path unescaped.
func (s *S3Store) objectURL(key string) *url.URL {
	u := *s.endpoint
	if s.cfg.PathStyle {
		u.Path = s.endpoint.Path + "/" + s.cfg.Bucket + "/" + key
	} else {
		u.Host = s.cfg.Bucket + "." + s.endpoint.Host
		u.Path = s.endpoint.Path + "/" + key
	}
	u.RawPath = ""
	u.RawQuery = ""
	return &u
}

func (s *S3Store) presign(method, key string, expires time.Time) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	now := s.now()
	d := expires.Sub(now).Round(time.Second)
	if d < time.Second {
		return "", fmt.Errorf("%w: %s is not in the future", ErrExpiry, expires.Format(time.RFC3339))
	}
	if d > maxS3Expiry {
		return "", fmt.Errorf("%w: %s is more than SigV4's %s ahead", ErrExpiry, expires.Format(time.RFC3339), maxS3Expiry)
	}
	cred := sigV4Credentials{AccessKeyID: s.cfg.AccessKeyID, SecretAccessKey: s.cfg.SecretAccessKey, SessionToken: s.cfg.SessionToken}
	return presignV4(method, s.objectURL(key), s.cfg.Region, cred, now, d), nil
}

// PresignPut signs a PUT to key until expires. maxBytes is not in the URL:
// see S3Store for how the cap holds.
func (s *S3Store) PresignPut(_ context.Context, key string, expires time.Time, maxBytes int64) (PresignedPut, error) {
	if maxBytes <= 0 {
		return PresignedPut{}, fmt.Errorf("presign %s: maxBytes %d must be positive", key, maxBytes)
	}
	u, err := s.presign(http.MethodPut, key, expires)
	if err != nil {
		return PresignedPut{}, err
	}
	return PresignedPut{URL: u, Method: http.MethodPut, Expires: expires.Truncate(time.Second), MaxBytes: maxBytes}, nil
}

// PresignGet signs a GET of key until expires.
func (s *S3Store) PresignGet(_ context.Context, key string, expires time.Time) (string, error) {
	return s.presign(http.MethodGet, key, expires)
}

func (s *S3Store) do(ctx context.Context, method, key string) (*http.Response, error) {
	u, err := s.presign(method, key, s.now().Add(5*time.Minute))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("s3 %s %s: %w", method, key, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("s3 %s %s: %w", method, key, err)
	}
	return resp, nil
}

func info(key string, resp *http.Response) ObjectInfo {
	oi := ObjectInfo{Key: key, Size: resp.ContentLength}
	if v := resp.Header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			oi.Size = n
		}
	}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		oi.ModTime = t.UTC()
	}
	return oi
}

func statusErr(method, key string, resp *http.Response) error {
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("s3 %s %s: %s: %s", method, key, resp.Status, strings.TrimSpace(string(b)))
}

// Stat sends a HEAD.
func (s *S3Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	resp, err := s.do(ctx, http.MethodHead, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ObjectInfo{}, statusErr(http.MethodHead, key, resp)
	}
	return info(key, resp), nil
}

// Open sends a GET.
func (s *S3Store) Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	resp, err := s.do(ctx, http.MethodGet, key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, ObjectInfo{}, statusErr(http.MethodGet, key, resp)
	}
	return resp.Body, info(key, resp), nil
}

// Delete sends a DELETE.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	resp, err := s.do(ctx, http.MethodDelete, key)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return statusErr(http.MethodDelete, key, resp)
	}
	return nil
}
