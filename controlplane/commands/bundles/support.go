package bundles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// URLGrace is how long after the command's not_after its upload URL stays
// valid: the node may accept the command just before not_after and still
// needs time to collect and upload.
const URLGrace = 15 * time.Minute

// ErrNoDestination is returned when logs.collect is asked for without
// supportBundles configured; commands.run refuses the command with it.
var ErrNoDestination = errors.New("logs.collect has no upload destination: the server is not configured with supportBundles")

// UploadFields are the payload fields the control plane fills into a
// logs.collect command. They carry no credential: the URL is presigned.
type UploadFields struct {
	UploadURL     string `json:"uploadUrl"`
	MaxBytes      int64  `json:"maxBytes"`
	SupportBundle bool   `json:"supportBundle"`
}

// Bundles is the control plane's support-bundle service: a store and a cap.
// A nil *Bundles means supportBundles is not configured.
type Bundles struct {
	store    BlobStore
	maxBytes int64
}

// New returns the service; maxBytes 0 means DefaultMaxBytes.
func New(store BlobStore, maxBytes int64) *Bundles {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Bundles{store: store, maxBytes: maxBytes}
}

// Store returns the blob store.
func (b *Bundles) Store() BlobStore { return b.store }

// MaxBytes is the cap every bundle is presigned with.
func (b *Bundles) MaxBytes() int64 { return b.maxBytes }

// Presign returns the bundle key for the command queued for nodeID under the
// queue's idempotency key (api:… with or without the prefix) and the payload
// fields to merge into the command: a PUT URL for that key valid until
// notAfter plus URLGrace, the cap and supportBundle: true. Call it once, in
// the enqueue transaction, and only for a new command: a retry that returns
// the command already queued presigns nothing new.
func (b *Bundles) Presign(ctx context.Context, nodeID, idempotencyKey string, notAfter time.Time) (string, UploadFields, error) {
	if b == nil {
		return "", UploadFields{}, ErrNoDestination
	}
	key := SupportBundleKey(nodeID, idempotencyKey)
	put, err := b.store.PresignPut(ctx, key, notAfter.Add(URLGrace), b.maxBytes)
	if err != nil {
		return "", UploadFields{}, fmt.Errorf("presigning support bundle %s: %w", key, err)
	}
	return key, UploadFields{UploadURL: put.URL, MaxBytes: put.MaxBytes, SupportBundle: true}, nil
}

// DownloadURL returns a URL from which an operator (or the CLI) reads the
// bundle under key for ttl: a presigned GET, so the reader needs no store
// credentials. It fails with ErrNotFound when the bundle is not there.
func (b *Bundles) DownloadURL(ctx context.Context, key string, ttl time.Duration) (string, ObjectInfo, error) {
	if b == nil {
		return "", ObjectInfo{}, ErrNoDestination
	}
	info, err := b.store.Stat(ctx, key)
	if err != nil {
		return "", ObjectInfo{}, err
	}
	u, err := b.store.PresignGet(ctx, key, time.Now().Add(ttl))
	if err != nil {
		return "", ObjectInfo{}, err
	}
	return u, info, nil
}

// Check verifies a bundle when logs.collect's result lands: the object must
// exist, be within the cap and have the SHA-256 (hex) the node reported.
// An object over the cap or with another digest is deleted, since on S3
// nothing else stops an oversize upload.
func (b *Bundles) Check(ctx context.Context, key string, sha256Hex string) (ObjectInfo, error) {
	if b == nil {
		return ObjectInfo{}, ErrNoDestination
	}
	rc, info, err := b.store.Open(ctx, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	defer rc.Close()
	if info.Size > b.maxBytes {
		return info, b.discard(ctx, key, fmt.Errorf("%w: %s is %d bytes, cap %d", ErrOverCap, key, info.Size, b.maxBytes))
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(rc, b.maxBytes+1))
	if err != nil {
		return info, fmt.Errorf("reading %s: %w", key, err)
	}
	if n > b.maxBytes {
		return info, b.discard(ctx, key, fmt.Errorf("%w: %s is over %d bytes", ErrOverCap, key, b.maxBytes))
	}
	info.Size = n
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, sha256Hex) {
		return info, b.discard(ctx, key, fmt.Errorf("%w: %s has SHA-256 %s, the node reported %s", ErrDigest, key, got, sha256Hex))
	}
	return info, nil
}

func (b *Bundles) discard(ctx context.Context, key string, cause error) error {
	if err := b.store.Delete(ctx, key); err != nil {
		return errors.Join(cause, fmt.Errorf("deleting it: %w", err))
	}
	return cause
}
