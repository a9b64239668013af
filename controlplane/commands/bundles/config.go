package bundles

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// DefaultMaxBytes is the byte cap of a support bundle when the configuration
// names none: 256 MiB.
const DefaultMaxBytes int64 = 256 << 20

// Config is the control plane's supportBundles section:
//
//	supportBundles:
//	  maxBytes: 268435456
//	  blob:
//	    driver: dir
//	    dir: { path: /var/lib/bc-controlplane/blobs, baseURL: https://cp.example.com/v1/blobs, secretFile: /etc/bc/blob.key }
//
// or driver: s3 with an s3 section. Without the section, logs.collect has no
// upload destination and commands.run refuses it.
type Config struct {
	Blob     BlobConfig `json:"blob" yaml:"blob"`
	MaxBytes int64      `json:"maxBytes,omitempty" yaml:"maxBytes,omitempty"`
}

// BlobConfig picks and configures a driver.
type BlobConfig struct {
	// Driver is "dir" or "s3".
	Driver string     `json:"driver" yaml:"driver"`
	Dir    *DirConfig `json:"dir,omitempty" yaml:"dir,omitempty"`
	S3     *S3Config  `json:"s3,omitempty" yaml:"s3,omitempty"`
}

// DirConfig configures a DirStore from a file.
type DirConfig struct {
	// Path is the directory holding the objects.
	Path string `json:"path" yaml:"path"`
	// BaseURL is where the control plane serves the store's Handler, as
	// nodes reach it ("https://cp.example.com/v1/blobs").
	BaseURL string `json:"baseURL" yaml:"baseURL"`
	// SecretFile holds the HMAC key, raw or base64, at least 32 bytes.
	// Every control plane replica must share it.
	SecretFile string `json:"secretFile" yaml:"secretFile"`
}

// EffectiveMaxBytes is MaxBytes or DefaultMaxBytes.
func (c Config) EffectiveMaxBytes() int64 {
	if c.MaxBytes > 0 {
		return c.MaxBytes
	}
	return DefaultMaxBytes
}

// Open builds the store c names.
func Open(c Config) (BlobStore, error) {
	if c.MaxBytes < 0 {
		return nil, fmt.Errorf("supportBundles.maxBytes %d: must not be negative", c.MaxBytes)
	}
	switch c.Blob.Driver {
	case "dir":
		if c.Blob.Dir == nil {
			return nil, errors.New("supportBundles.blob.dir: required with driver dir")
		}
		secret, err := readSecret(c.Blob.Dir.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("supportBundles.blob.dir.secretFile: %w", err)
		}
		return NewDirStore(DirOptions{Root: c.Blob.Dir.Path, BaseURL: c.Blob.Dir.BaseURL, Secret: secret})
	case "s3":
		if c.Blob.S3 == nil {
			return nil, errors.New("supportBundles.blob.s3: required with driver s3")
		}
		return NewS3Store(*c.Blob.S3)
	default:
		return nil, fmt.Errorf("supportBundles.blob.driver %q: must be dir or s3", c.Blob.Driver)
	}
}

func readSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("required")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	if d, err := base64.StdEncoding.DecodeString(s); err == nil && len(d) >= minSecret {
		return d, nil
	}
	return []byte(s), nil
}
