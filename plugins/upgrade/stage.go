package upgrade

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/better-compute/commands/internal/upgrade"
)

// ErrBadPackage is wrapped for a package that is not a bcd release.
var ErrBadPackage = errors.New("not a bcd package")

// maxExpansion bounds the unpacked size against the package's.
const maxExpansion = 8

// unpack extracts the tar.gz at pkg into dir: regular files and
// directories only, every path inside dir, at most maxExpansion times the
// package's size, and it must hold bcd and bcd-upgrader.
func unpack(pkg, dir string, size int64) error {
	f, err := os.Open(pkg)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadPackage, err)
	}
	tr := tar.NewReader(zr)
	budget := size * maxExpansion
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadPackage, err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: entry %q leaves the package", ErrBadPackage, h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil { //nolint:gosec // an install directory: systemd and operators must read and run the staged bcd
				return err
			}
		case tar.TypeReg:
			budget -= h.Size
			if budget < 0 {
				return fmt.Errorf("%w: unpacks to more than %d times its size", ErrBadPackage, maxExpansion)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { //nolint:gosec // an install directory: systemd and operators must read and run the staged bcd
				return err
			}
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode)&0o755)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBadPackage, err)
			}
			_, err = io.Copy(out, io.LimitReader(tr, h.Size))
			if err == nil {
				err = out.Sync()
			}
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: entry %q is not a file or a directory", ErrBadPackage, h.Name)
		}
	}
	for _, need := range []string{upgrade.DaemonBinary, upgrade.HelperBinary} {
		if st, err := os.Stat(filepath.Join(dir, need)); err != nil || st.Mode()&0o100 == 0 {
			return fmt.Errorf("%w: it holds no executable %s", ErrBadPackage, need)
		}
	}
	return nil
}
