package signing

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/trust"
)

// Issue 31: "with the key's file mode and owner checked". A key others can
// read is refused with the file, the mode found and the chmod that fixes
// it; 0600 (and 0400) owned by this process's user is accepted.
func TestCheckKeyFile_RefusesGroupOrWorldAccessNamingTheFix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "command-root.pem")
	_, err := CreateRoot(path)
	require.NoError(t, err)
	require.NoError(t, CheckKeyFile(path), "CreateRoot's own file passes")

	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		require.NoError(t, os.Chmod(path, mode))
		err := CheckKeyFile(path)
		require.Error(t, err, "mode %04o", mode)
		require.Equal(t, path+" is mode "+"0"+strconv.FormatUint(uint64(mode), 8)+
			": a private key must be readable by its owner only, and group or others can read or write this one; fix: chmod 0600 "+path, err.Error())
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		require.NoError(t, os.Chmod(path, mode))
		require.NoError(t, CheckKeyFile(path), "mode %04o", mode)
	}
}

// "owned by another user" is refused, naming both users and the chown.
// Making a file another user owns needs root (chown); elsewhere only this
// case is skipped.
func TestCheckKeyFile_RefusesAKeyOwnedByAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root; the mode cases run in TestCheckKeyFile_RefusesGroupOrWorldAccessNamingTheFix")
	}
	path := filepath.Join(t.TempDir(), "command-root.pem")
	_, err := CreateRoot(path)
	require.NoError(t, err)
	const other = 65534 // nobody on Debian and Red Hat
	require.NoError(t, os.Chown(path, other, other))
	err = CheckKeyFile(path)
	require.Error(t, err)
	require.Regexp(t, `^`+regexp.QuoteMeta(path)+` is owned by uid 65534( \(\w+\))?, but this process runs as uid 0 \(root\): a private key must belong to the user that reads it; fix: chown root `+regexp.QuoteMeta(path)+` \(or run as its owner\)$`, err.Error())

	require.NoError(t, os.Chown(path, 0, 0))
	require.NoError(t, CheckKeyFile(path))
}

func TestCheckKeyFile_MissingOrNotAFile(t *testing.T) {
	dir := t.TempDir()
	err := CheckKeyFile(filepath.Join(dir, "absent.pem"))
	require.ErrorIs(t, err, os.ErrNotExist)
	err = CheckKeyFile(dir)
	require.ErrorContains(t, err, dir+" is not a regular file")
}

// CreateRoot writes the root 0600 in a 0700 directory it creates, the
// public half 0644 beside it, and never overwrites a key.
func TestCreateRoot_ModesAndNeverOverwrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	path := filepath.Join(dir, "command-root.pem")
	id, err := CreateRoot(path)
	require.NoError(t, err)

	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		return fi.Mode().Perm()
	}
	require.Equal(t, os.FileMode(0o700), mode(dir))
	require.Equal(t, os.FileMode(0o600), mode(path))
	require.Equal(t, os.FileMode(0o644), mode(path+".pub"))

	priv, err := trust.LoadEd25519PrivateKey(path)
	require.NoError(t, err)
	pub, err := trust.LoadEd25519PublicKey(path + ".pub")
	require.NoError(t, err)
	require.Equal(t, id, trust.Ed25519KeyID(pub))
	require.True(t, pub.Equal(priv.Public()))

	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = CreateRoot(path)
	require.True(t, errors.Is(err, ErrKeyExists), "%v", err)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the existing root is kept")
}
