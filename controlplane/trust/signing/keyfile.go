package signing

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/better-compute/commands/internal/trust"
)

// CheckKeyFile refuses a private key file that anyone but the user this
// process runs as could read: one with any group or other permission bit,
// or one owned by another user. Whoever can read the command-signing root
// can make every node run anything, so a key left 0644 by a copy, or owned
// by an account other than the server's, is a start-up error that names
// the file, what was found and the command that fixes it, rather than a
// key silently used.
func CheckKeyFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is mode %04o: a private key must be readable by its owner only, and group or others can read or write this one; fix: chmod 0600 %s", path, perm, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // no owner to compare on this platform
	}
	if me := os.Geteuid(); int(st.Uid) != me {
		return fmt.Errorf("%s is owned by %s, but this process runs as %s: a private key must belong to the user that reads it; fix: chown %s %s (or run as its owner)",
			path, describeUID(int(st.Uid)), describeUID(me), userName(me), path)
	}
	return nil
}

// describeUID is "uid 998 (bc-server)", or "uid 998" for an unknown uid.
func describeUID(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// userName is uid's name for chown, or the number when it has none.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// ErrKeyExists is CreateRoot's answer when the key file is already there:
// a key is never overwritten.
var ErrKeyExists = errors.New("key file exists")

// CreateRoot makes a new command-signing root: the private key at path
// (mode 0600, in a directory created 0700 when missing) and its public key
// at path+".pub" (0644, for the nodes' trustAnchors). It never overwrites:
// an existing path is ErrKeyExists, so two processes racing to create the
// root end with one root. It returns the root's key id.
func CreateRoot(path string) (string, error) {
	pub, priv, err := trust.NewEd25519()
	if err != nil {
		return "", err
	}
	privPEM, err := trust.MarshalPrivateKeyPEM(priv)
	if err != nil {
		return "", err
	}
	pubPEM, err := trust.MarshalPublicKeyPEM(pub)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := writeNew(path, privPEM, 0o600); err != nil {
		return "", err
	}
	// The public half is derived: an old one left beside a new root (the
	// caller refuses that case first) would be wrong, so it is replaced.
	if err := os.WriteFile(path+".pub.tmp", pubPEM, 0o644); err != nil { //nolint:gosec // a public key: the approvers and nodes read it
		return "", fmt.Errorf("writing %s.pub: %w", path, err)
	}
	// Readable by all whatever the umask: it is what nodes are given.
	if err := os.Chmod(path+".pub.tmp", 0o644); err != nil { //nolint:gosec // a public key: the approvers and nodes read it
		return "", fmt.Errorf("writing %s.pub: %w", path, err)
	}
	if err := os.Rename(path+".pub.tmp", path+".pub"); err != nil {
		return "", fmt.Errorf("writing %s.pub: %w", path, err)
	}
	return trust.Ed25519KeyID(pub), nil
}

// writeNew writes b to a file that must not exist yet, and syncs it.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrKeyExists)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
