package archive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/better-compute/commands/controlplane/commands/bundles"
)

// ErrIntegrity is wrapped when an archive object is not the one its
// manifest describes (size, SHA-256 or a line that does not parse).
var ErrIntegrity = errors.New("archive integrity")

// Source is what reading the archive needs: the blob store, or a copy of
// it in a directory (DirSource).
type Source interface {
	Open(ctx context.Context, key string) (io.ReadCloser, bundles.ObjectInfo, error)
}

// Sink is what writing the archive needs.
type Sink interface {
	Source
	Put(ctx context.Context, key string, body io.Reader, size int64) error
}

// DirSource reads an archive from a directory laid out as the blob store's
// root (a dir store, or an S3 bucket copied down), for auditors without the
// server's configuration.
type DirSource string

// Open reads key under the directory.
func (d DirSource) Open(_ context.Context, key string) (io.ReadCloser, bundles.ObjectInfo, error) {
	if err := bundles.CheckKey(key); err != nil {
		return nil, bundles.ObjectInfo{}, err
	}
	f, err := os.Open(filepath.Join(string(d), filepath.FromSlash(key)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, bundles.ObjectInfo{}, fmt.Errorf("%w: %s", bundles.ErrNotFound, key)
	}
	if err != nil {
		return nil, bundles.ObjectInfo{}, fmt.Errorf("opening %s: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, bundles.ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return f, bundles.ObjectInfo{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// ReadManifest reads tenant's manifest; a missing one is an empty manifest.
func ReadManifest(ctx context.Context, src Source, tenant string) (Manifest, error) {
	m := Manifest{Tenant: tenant}
	r, _, err := src.Open(ctx, ManifestKey(tenant))
	if errors.Is(err, bundles.ErrNotFound) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("reading the manifest of %q: %w", tenant, err)
	}
	defer r.Close()
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return m, fmt.Errorf("%w: the manifest of %q: %w", ErrIntegrity, tenant, err)
	}
	if m.Tenant != tenant {
		return m, fmt.Errorf("%w: the manifest under %s names tenant %q", ErrIntegrity, Dir(tenant), m.Tenant)
	}
	return m, nil
}

// WriteManifest writes m as its tenant's manifest, indented so an auditor can read it.
func WriteManifest(ctx context.Context, sink Sink, m Manifest) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return fmt.Errorf("marshalling the manifest: %w", err)
	}
	b = append(b, '\n')
	return sink.Put(ctx, ManifestKey(m.Tenant), bytes.NewReader(b), int64(len(b)))
}

// ReadObject reads an object's lines, checking its size and SHA-256 against
// e (skipped when e.SHA256 is "": a crash left an object that no manifest
// names yet, which the archiver rewrites).
func ReadObject(ctx context.Context, src Source, e ObjectEntry) ([][]byte, error) {
	r, _, err := src.Open(ctx, e.Key)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", e.Key, err)
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", e.Key, err)
	}
	if e.SHA256 != "" {
		sum := sha256.Sum256(raw)
		if got := hex.EncodeToString(sum[:]); got != e.SHA256 || int64(len(raw)) != e.Bytes {
			return nil, fmt.Errorf("%w: %s: %d bytes, SHA-256 %s; the manifest says %d bytes, %s", ErrIntegrity, e.Key, len(raw), got, e.Bytes, e.SHA256)
		}
	}
	dec, err := zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	defer dec.Close()
	var lines [][]byte
	sc := bufio.NewScanner(dec)
	sc.Buffer(make([]byte, 0, 64<<10), 256<<20)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil || rec.Type == "" {
			return nil, fmt.Errorf("%w: %s line %d does not parse as a record", ErrIntegrity, e.Key, len(lines)+1)
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrIntegrity, e.Key, err)
	}
	return lines, nil
}

// encoders are zstd encoders kept between objects: a new one allocates its
// tables afresh, about 18 MiB for an hour of 600 records, which made
// garbage of nearly all the archiver's allocation (an hour took 3.8 ms to
// encode, 18.5 MB allocated; reused, see TestAReusedEncoderWritesTheSameBytes
// and the commit for the figures).
var encoders = sync.Pool{New: func() any {
	enc, err := zstd.NewWriter(nil, encoderOptions()...)
	if err != nil {
		return err
	}
	return enc
}}

// encoderOptions are the settings every object is written with.
func encoderOptions() []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault)}
}

// EncodeObject compresses lines, one a line, with settings fixed so that
// the same lines always make the same bytes (one encoder goroutine, the
// default level, no checksum of the frame's time): a rerun of an hour
// rewrites the same object. The encoder is reset for each object, which
// writes what a new one would.
func EncodeObject(lines [][]byte) ([]byte, string, error) {
	var buf bytes.Buffer
	got := encoders.Get()
	enc, ok := got.(*zstd.Encoder)
	if !ok {
		return nil, "", fmt.Errorf("zstd: %w", got.(error))
	}
	enc.Reset(&buf)
	// Back to the pool only when it closed cleanly: a failed one is dropped.
	if err := writeLines(enc, lines); err != nil {
		return nil, "", fmt.Errorf("zstd: %w", err)
	}
	enc.Reset(nil)
	encoders.Put(enc)
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:]), nil
}

// writeLines writes lines to enc, each followed by a newline, and closes
// the frame.
func writeLines(enc *zstd.Encoder, lines [][]byte) error {
	for _, l := range lines {
		if _, err := enc.Write(l); err != nil {
			return err
		}
		if _, err := enc.Write([]byte{'\n'}); err != nil {
			return err
		}
	}
	return enc.Close()
}
