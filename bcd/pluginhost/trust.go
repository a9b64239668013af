package pluginhost

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// trusted says why the plugin file at path (symlinks resolved; info is its
// Stat) must not run, or "" when it may. bcd runs what is in its plugin
// directory as its own user, usually root, so anyone who can change a
// plugin file, or the directory that holds it (and so swap the file), can
// run code as bcd: such a plugin is refused. A plugin may run when
//   - the file is owned by root or by bcd's own user,
//   - the file is not writable by group or others,
//   - the directory holding it is owned by root or by bcd's own user and is
//     not writable by group or others.
//
// A pinned SHA-256 (Config.SHA256) is checked as well when the plugin
// starts; these rules also close the window between that check and the
// exec, which go-plugin's SecureConfig leaves open.
func trusted(path string, info fs.FileInfo) string {
	if why := ownedByUs("file", info); why != "" {
		return why
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Sprintf("the file is writable by group or others (mode %s)", perm)
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return fmt.Sprintf("its directory %s: %v", dir, err)
	}
	if why := ownedByUs("directory "+dir, di); why != "" {
		return why
	}
	if perm := di.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Sprintf("its directory %s is writable by group or others (mode %s)", dir, perm)
	}
	return ""
}

// ownedByUs says why what is owned by neither root nor bcd's own user, or "".
func ownedByUs(what string, info fs.FileInfo) string {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Sprintf("the %s's owner cannot be read", what)
	}
	if st.Uid == 0 || int(st.Uid) == os.Geteuid() {
		return ""
	}
	return fmt.Sprintf("the %s is owned by %s, neither root nor bcd's own user (%s)", what, userName(st.Uid), userName(uint32(os.Geteuid())))
}

// userName is "uid 1000 (alice)", or "uid 1000" when no user has the uid.
func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return "uid " + id + " (" + u.Username + ")"
	}
	return "uid " + id
}

// fileID identifies a file's content without reading it: a new file (an
// install, a rename over the old one) has another inode, and a file
// rewritten in place another size, mtime or ctime.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime time.Time
}

func fileIDOf(info fs.FileInfo) fileID {
	id := fileID{size: info.Size(), mtime: info.ModTime()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = st.Dev, st.Ino
		id.ctime = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return id
}
