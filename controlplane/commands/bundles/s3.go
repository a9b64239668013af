package bundles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// maxS3Expiry is SigV4's longest presigned lifetime: 7 days.
const maxS3Expiry = 7 * 24 * time.Hour

// s3RequestTimeout bounds each request the store makes itself, body
// included: a bucket that stops answering must not hang a worker whose ctx
// has no deadline.
const s3RequestTimeout = 5 * time.Minute

// S3Config configures an S3Store.
type S3Config struct {
	// Endpoint is the service URL: "https://s3.eu-west-1.amazonaws.com", or
	// a MinIO or Ceph RGW address. It names a host, not a path below one.
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

// S3Store is a BlobStore in an S3-compatible bucket, through minio-go: its
// SigV4 presigned URLs for the node and the operator, its client for the
// control plane's own reads and writes.
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
	client *minio.Client
	bucket string
	now    func() time.Time
}

var _ BlobStore = (*S3Store)(nil)

// NewS3Store checks cfg and returns the store. It makes no request: the
// region is configured, so minio-go never asks the bucket for it.
func NewS3Store(cfg S3Config) (*S3Store, error) {
	return newS3Store(cfg, nil, 0)
}

// newS3Store sends the store's own requests through rt, each tried up to
// tries times; nil and 0 are minio-go's defaults (its transport, 10 tries).
func newS3Store(cfg S3Config, rt http.RoundTripper, tries int) (*S3Store, error) {
	u, err := url.Parse(strings.TrimSuffix(cfg.Endpoint, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("s3 store: endpoint %q must be an http(s) URL", cfg.Endpoint)
	}
	if u.Path != "" || u.RawQuery != "" {
		return nil, fmt.Errorf("s3 store: endpoint %q must name a host, with no path or query", cfg.Endpoint)
	}
	if cfg.Bucket == "" || cfg.Region == "" || cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, errors.New("s3 store: bucket, region, accessKeyId and secretAccessKey are required")
	}
	lookup := minio.BucketLookupDNS
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken),
		Secure:       u.Scheme == "https",
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    rt,
		MaxRetries:   tries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	// The URLs name the host the operator configured, not AWS's dual-stack
	// one that minio-go would otherwise put in their place.
	client.SetS3EnableDualstack(false)
	return &S3Store{client: client, bucket: cfg.Bucket, now: time.Now}, nil
}

// lifetime is how long from now a URL for key valid until expires lives,
// in whole seconds, within SigV4's bounds.
func (s *S3Store) lifetime(key string, expires time.Time) (time.Duration, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	d := expires.Sub(s.now()).Round(time.Second)
	if d < time.Second {
		return 0, fmt.Errorf("%w: %s is not in the future", ErrExpiry, expires.Format(time.RFC3339))
	}
	if d > maxS3Expiry {
		return 0, fmt.Errorf("%w: %s is more than SigV4's %s ahead", ErrExpiry, expires.Format(time.RFC3339), maxS3Expiry)
	}
	return d, nil
}

// PresignPut signs a PUT to key until expires: only the host is a signed
// header, so the node's plain PUT with whatever Content-Type and
// Content-Length it sends is accepted. maxBytes is not in the URL: see
// S3Store for how the cap holds.
func (s *S3Store) PresignPut(ctx context.Context, key string, expires time.Time, maxBytes int64) (PresignedPut, error) {
	if maxBytes <= 0 {
		return PresignedPut{}, fmt.Errorf("presign %s: maxBytes %d must be positive", key, maxBytes)
	}
	d, err := s.lifetime(key, expires)
	if err != nil {
		return PresignedPut{}, err
	}
	u, err := s.client.PresignedPutObject(ctx, s.bucket, key, d)
	if err != nil {
		return PresignedPut{}, fmt.Errorf("presign PUT %s: %w", key, err)
	}
	return PresignedPut{URL: u.String(), Method: http.MethodPut, Expires: expires.Truncate(time.Second), MaxBytes: maxBytes}, nil
}

// PresignGet signs a GET of key until expires.
func (s *S3Store) PresignGet(ctx context.Context, key string, expires time.Time) (string, error) {
	d, err := s.lifetime(key, expires)
	if err != nil {
		return "", err
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, d, nil)
	if err != nil {
		return "", fmt.Errorf("presign GET %s: %w", key, err)
	}
	return u.String(), nil
}

// s3Err maps a 404 (no such key, or no such bucket: S3 answers a HEAD with
// no body to tell them apart) to ErrNotFound and wraps the rest.
func s3Err(op, key string, err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fmt.Errorf("s3 %s %s: %w", op, key, err)
}

func objectInfo(key string, oi minio.ObjectInfo) ObjectInfo {
	return ObjectInfo{Key: key, Size: oi.Size, ModTime: oi.LastModified.UTC()}
}

// Stat sends a HEAD.
func (s *S3Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := CheckKey(key); err != nil {
		return ObjectInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s3RequestTimeout)
	defer cancel()
	oi, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s3Err(http.MethodHead, key, err)
	}
	return objectInfo(key, oi), nil
}

// Open sends a GET; the request's timeout runs until the reader is closed.
func (s *S3Store) Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	if err := CheckKey(key); err != nil {
		return nil, ObjectInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s3RequestTimeout)
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		cancel()
		return nil, ObjectInfo{}, s3Err(http.MethodGet, key, err)
	}
	// GetObject is lazy: Stat sends the GET and reads its headers.
	oi, err := obj.Stat()
	if err != nil {
		_ = obj.Close()
		cancel()
		return nil, ObjectInfo{}, s3Err(http.MethodGet, key, err)
	}
	return &cancelOnClose{ReadCloser: obj, cancel: cancel}, objectInfo(key, oi), nil
}

// cancelOnClose releases the request's context when its reader is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// Delete sends a DELETE; a missing key is no error.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s3RequestTimeout)
	defer cancel()
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if err := s3Err(http.MethodDelete, key, err); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}
