package site

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Credential is a BMC's username and password. It lives in memory for one
// command only; String, GoString and MarshalJSON redact the password, so a
// log line or a result that names a Credential by mistake never carries it.
type Credential struct {
	Username string
	Password string
}

// String names the user only.
func (c Credential) String() string { return "credential(" + c.Username + ", password redacted)" }

// GoString is String, for %#v.
func (c Credential) GoString() string { return c.String() }

// MarshalJSON writes the username only.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"username": c.Username, "password": "[redacted]"})
}

// CredentialSource turns an inventory entry's credentialRef into the
// credential. It is the one seam through which BMC secrets reach a plugin:
// CommandSecrets reads the values bcd fetched for the command's secretRefs
// (sealed to a one-time key, in memory for the run only), and
// FileCredentials reads them from the site agent's disk; the providers and
// kinds see only the interface.
type CredentialSource interface {
	// Credential returns the credential named ref.
	Credential(ctx context.Context, ref string) (Credential, error)
}

// ErrNoCredential is returned for a reference the source does not hold.
var ErrNoCredential = errors.New("no such credential")

// FileCredentials reads <Dir>/<ref>.json, which must be a regular file of
// mode 0600 or stricter holding {"username": "...", "password": "..."}.
type FileCredentials struct {
	Dir string
}

// Credential reads ref's file.
func (f FileCredentials) Credential(_ context.Context, ref string) (Credential, error) {
	if f.Dir == "" {
		return Credential{}, fmt.Errorf("credential %q: the inventory sets no credentials.dir", ref)
	}
	if !refPattern.MatchString(ref) {
		return Credential{}, fmt.Errorf("credential reference %q: must be letters, digits, dots, dashes or underscores", ref)
	}
	path := filepath.Join(f.Dir, ref+".json")
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Credential{}, fmt.Errorf("credential %q: %w (no %s)", ref, ErrNoCredential, path)
	}
	if err != nil {
		return Credential{}, fmt.Errorf("credential %q: %w", ref, err)
	}
	if !st.Mode().IsRegular() {
		return Credential{}, fmt.Errorf("credential %q: %s is not a regular file", ref, path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Credential{}, fmt.Errorf("credential %q: %s has mode %04o: make it 0600 (chmod 600), since it holds a BMC password", ref, path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Credential{}, fmt.Errorf("credential %q: %w", ref, err)
	}
	return ParseCredential(ref, b)
}

// ParseCredential parses a credential file's body; its errors never quote
// the body, which holds the password.
func ParseCredential(ref string, b []byte) (Credential, error) {
	var raw struct {
		Username *string `json:"username"`
		Password *string `json:"password"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Credential{}, fmt.Errorf("credential %q: not a JSON object of username and password", ref)
	}
	if raw.Username == nil || *raw.Username == "" || raw.Password == nil {
		return Credential{}, fmt.Errorf("credential %q: needs a username and a password", ref)
	}
	return Credential{Username: *raw.Username, Password: *raw.Password}, nil
}

// CommandSecrets is the credential source of one command: a secretRef of
// the command named like the inventory's credentialRef holds the
// credential ({"username": …, "password": …}, the value bcd exchanged for
// it); a ref the command does not carry goes to Fallback (the site
// agent's credential files), if any.
type CommandSecrets struct {
	Secrets  map[string][]byte
	Fallback CredentialSource
}

// Credential returns ref's credential from the command's secrets, or from
// Fallback.
func (c CommandSecrets) Credential(ctx context.Context, ref string) (Credential, error) {
	if v, ok := c.Secrets[ref]; ok {
		return ParseCredential(ref, v)
	}
	if c.Fallback != nil {
		if fc, ok := c.Fallback.(FileCredentials); !ok || fc.Dir != "" {
			return c.Fallback.Credential(ctx, ref)
		}
	}
	return Credential{}, fmt.Errorf("credential %q: %w: the command carries no secretRef %q and the inventory sets no credentials.dir (name it in the command's secretRefs, or give the site agent a credential file)", ref, ErrNoCredential, ref)
}
