// Package bundles is the control plane's support-bundle blob store: where
// logs.collect uploads a node's bundle and where operators read it. A store
// presigns a PUT for one key, with a deadline and a byte cap, so that no
// credential travels in the command; the URL itself is the capability.
//
// Two drivers: DirStore, a directory the control plane serves itself (its
// Handler checks the signature, the deadline, the method and the cap, and
// leaves nothing partial), and S3Store, S3-compatible storage through
// minio-go with SigV4 presigned URLs (see S3Store for how the cap holds
// there).
package bundles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Errors the stores return; wrapped with context.
var (
	// ErrNotFound: no object under the key.
	ErrNotFound = errors.New("no such bundle")
	// ErrInvalidKey: the key could escape the store or is empty.
	ErrInvalidKey = errors.New("invalid blob key")
	// ErrExpiry: the URL's deadline is past, or further than the store allows.
	ErrExpiry = errors.New("invalid presign expiry")
	// ErrOverCap: a stored object is larger than its cap.
	ErrOverCap = errors.New("bundle over its byte cap")
	// ErrDigest: a stored object's SHA-256 is not the one the node reported.
	ErrDigest = errors.New("bundle digest mismatch")
)

// PresignedPut is an upload capability for one key.
type PresignedPut struct {
	// URL is where to PUT the object; it carries the signature.
	URL string `json:"url"`
	// Method is always PUT.
	Method string `json:"method"`
	// Expires is when the store stops accepting the upload.
	Expires time.Time `json:"expires"`
	// MaxBytes is the cap the uploader must stay within.
	MaxBytes int64 `json:"maxBytes"`
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
}

// BlobStore stores support bundles.
type BlobStore interface {
	// PresignPut returns a URL that accepts one PUT of at most maxBytes to
	// key until expires.
	PresignPut(ctx context.Context, key string, expires time.Time, maxBytes int64) (PresignedPut, error)
	// PresignGet returns a URL that reads key until expires; operators and
	// the CLI download bundles through it.
	PresignGet(ctx context.Context, key string, expires time.Time) (string, error)
	// Stat describes key, or returns an error wrapping ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Open reads key; the caller closes the reader.
	Open(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
	// Delete removes key; a missing key is no error.
	Delete(ctx context.Context, key string) error
}

// SupportBundleKey is where a node's bundle for one command lives:
// support-bundles/{nodeId}/{key}.bundle, key being the queue's api:…
// idempotency key without the api: prefix (a prefix that is there anyway is
// dropped, so callers may pass either).
func SupportBundleKey(nodeID, key string) string {
	return "support-bundles/" + nodeID + "/" + strings.TrimPrefix(key, "api:") + ".bundle"
}

// CheckKey refuses a key that is empty, absolute, or has an empty, "." or
// ".." segment, a backslash or a control character: a key is a path below
// the store's root and must never leave it.
func CheckKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: %q: must be 1 to 1024 bytes", ErrInvalidKey, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("%w: %q: no control characters or backslashes", ErrInvalidKey, key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q: segments must be non-empty and neither \".\" nor \"..\"", ErrInvalidKey, key)
		}
	}
	if strings.HasPrefix(key, uploadsDir+"/") || key == uploadsDir {
		return fmt.Errorf("%w: %q: %s is the store's own", ErrInvalidKey, key, uploadsDir)
	}
	return nil
}
