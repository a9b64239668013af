package pluginhost

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// binary is one plugin file that passed discovery.
type binary struct {
	// name is the file name in the plugin directory; logs and errors use it.
	name string
	// path is the file to run, symlinks resolved.
	path string
	// sha256 is the pinned digest, nil when unpinned.
	sha256 []byte
	// file identifies the file's content as discovered: a reload keeps the
	// running process of a binary whose file and pin did not change.
	file fileID
}

// same reports whether b names the very file, and the pin, that o did.
func (b binary) same(o binary) bool {
	return b.path == o.path && b.file == o.file && bytes.Equal(b.sha256, o.sha256)
}

// discover lists the plugin binaries in dir, in name order. Directories,
// hidden files and files without an execute bit are skipped quietly (a README
// may sit there); a file that looks like a plugin but is unsafe to run is
// refused with an error that says why, and logged: a symlink that leaves dir
// or does not end at a regular file, a file or directory that another user
// could change (see trusted), a pin that is not hex.
func discover(logger hclog.Logger, dir string, pins map[string]string) ([]binary, []Refusal) {
	var errs []Refusal
	refuse := func(name, format string, args ...any) {
		err := fmt.Errorf("%w: %s: %s", ErrRefused, name, fmt.Sprintf(format, args...))
		logger.Error("refusing plugin", "plugin", name, "error", err)
		errs = append(errs, Refusal{Plugin: name, Err: err})
	}
	dirErr := func(err error) []Refusal {
		logger.Error("cannot read the plugin directory", "error", err)
		return []Refusal{{Err: err}}
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, dirErr(fmt.Errorf("plugin directory %s: %w", dir, err))
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, dirErr(fmt.Errorf("plugin directory %s: %w", dir, err))
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, dirErr(fmt.Errorf("reading plugin directory %s: %w", dir, err))
	}
	seen := map[string]bool{}
	var out []binary
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
			continue
		}
		if _, ok := pins[name]; ok {
			seen[name] = true
		}
		path := filepath.Join(root, name)
		info, err := os.Lstat(path)
		if err != nil {
			refuse(name, "%v", err)
			continue
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(path)
			if err != nil {
				refuse(name, "symlink does not resolve: %v", err)
				continue
			}
			if !inside(root, target) {
				refuse(name, "symlink to %s leaves the plugin directory", target)
				continue
			}
			if info, err = os.Stat(target); err != nil {
				refuse(name, "%v", err)
				continue
			}
			path = target
		}
		switch {
		case info.IsDir():
			continue
		case !info.Mode().IsRegular():
			refuse(name, "not a regular file (%s)", info.Mode().Type())
			continue
		case info.Mode().Perm()&0o111 == 0:
			logger.Debug("skipping file that is not executable", "file", name)
			continue
		}
		if why := trusted(path, info); why != "" {
			refuse(name, "%s", why)
			continue
		}
		b := binary{name: name, path: path, file: fileIDOf(info)}
		if pin, ok := pins[name]; ok {
			sum, err := hex.DecodeString(strings.TrimSpace(pin))
			if err != nil || len(sum) != 32 {
				refuse(name, "pinned SHA-256 %q is not 64 hex digits", pin)
				continue
			}
			b.sha256 = sum
		}
		out = append(out, b)
	}
	for name := range pins {
		if !seen[name] {
			logger.Warn("pinned plugin not found in the plugin directory", "plugin", name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, errs
}

// inside reports whether path lies within root (both absolute and clean).
func inside(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
