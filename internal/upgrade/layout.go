package upgrade

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/renameio/v2"

	"github.com/better-compute/commands/internal/fsutil"
)

// DefaultRoot is the install directory of a packaged node.
const DefaultRoot = "/var/lib/bcd/install"

// Files inside a version directory.
const (
	// DaemonBinary is bcd itself.
	DaemonBinary = "bcd"
	// HelperBinary is bcd-upgrader, started as a transient unit.
	HelperBinary = "bcd-upgrader"
	// PluginsDir holds the version's plugins and PinsFile their pins.
	PluginsDir = "plugins"
	PinsFile   = "plugin-sha256.json"
)

// Layout is the install directory: versions/<version>/ side by side and the
// current symlink pointing at the active one.
type Layout struct {
	// Root is the install directory.
	Root string
}

// Versions is the directory of installed versions.
func (l Layout) Versions() string { return filepath.Join(l.Root, "versions") }

// VersionDir is where version v is (or will be) installed.
func (l Layout) VersionDir(v string) string { return filepath.Join(l.Versions(), v) }

// Current is the symlink systemd's ExecStart goes through.
func (l Layout) Current() string { return filepath.Join(l.Root, "current") }

// StateFile is the upgrade state file.
func (l Layout) StateFile() string { return filepath.Join(l.Root, "upgrade.json") }

// SkipFile lists the targets that rolled back.
func (l Layout) SkipFile() string { return filepath.Join(l.Root, "skipped.json") }

func (l Layout) stateLock() string  { return filepath.Join(l.Root, "upgrade.lock") }
func (l Layout) helperLock() string { return filepath.Join(l.Root, "helper.lock") }

// ValidVersion refuses a version that could name a path outside versions/.
func ValidVersion(v string) error {
	if v == "" || v == "." || v == ".." || strings.ContainsAny(v, "/\\\x00") || strings.HasPrefix(v, ".") || len(v) > 128 {
		return fmt.Errorf("version %q: not a version (no slashes, no leading dot, at most 128 bytes)", v)
	}
	return nil
}

// CurrentVersion is the version the current symlink points at.
func (l Layout) CurrentVersion() (string, error) {
	target, err := os.Readlink(l.Current())
	if err != nil {
		return "", fmt.Errorf("reading the active version: %w", err)
	}
	v := filepath.Base(target)
	if err := ValidVersion(v); err != nil {
		return "", fmt.Errorf("the current symlink points at %s: %w", target, err)
	}
	return v, nil
}

// Activate points current at version v atomically (a new symlink renamed
// over the old one), so systemd starts either the old or the new bcd,
// never neither.
func (l Layout) Activate(v string) error {
	if err := ValidVersion(v); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(l.VersionDir(v), DaemonBinary)); err != nil {
		return fmt.Errorf("activating %s: %w", v, err)
	}
	if err := renameio.Symlink(filepath.Join("versions", v), l.Current()); err != nil {
		return fmt.Errorf("activating %s: %w", v, err)
	}
	return fsutil.SyncDir(l.Root)
}

// flock takes an exclusive lock on path; nonblocking reports false when
// another process holds it.
func flock(path string, nonblocking bool) (release func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("opening %s: %w", path, err)
	}
	how := syscall.LOCK_EX
	if nonblocking {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { _ = f.Close() }, true, nil
}

// HoldHelper takes the helper's lock for the helper's whole life; ok is
// false when another helper holds it.
func (l Layout) HoldHelper() (release func(), ok bool, err error) {
	return flock(l.helperLock(), true)
}

// HelperRunning reports whether a helper holds its lock now. A helper that
// died (SIGKILL, a reboot) holds nothing.
func (l Layout) HelperRunning() (bool, error) {
	release, ok, err := flock(l.helperLock(), true)
	if err != nil {
		return false, err
	}
	if ok {
		release()
	}
	return !ok, nil
}
