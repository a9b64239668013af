package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Key is the at-rest key: 32 bytes for AES-256-GCM.
type Key struct {
	aead cipher.AEAD
	// ID names the key in each row: the first 8 bytes of its SHA-256, in
	// hex, so rows under an old key show after a rotation.
	ID string
}

// LoadKeyFile reads the at-rest key from path: 32 bytes, raw or as 64 hex
// digits or base64, with surrounding space ignored. The file must not be
// readable by others.
func LoadKeyFile(path string) (*Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key file %s is mode %04o: make it readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	raw := b
	if len(b) != 32 {
		t := strings.TrimSpace(string(b))
		if h, err := hex.DecodeString(t); err == nil && len(h) == 32 {
			raw = h
		} else if d, err := base64.StdEncoding.DecodeString(t); err == nil && len(d) == 32 {
			raw = d
		} else {
			return nil, fmt.Errorf("secrets key file %s: want 32 bytes (raw, 64 hex digits or base64); make one with: head -c 32 /dev/urandom > %s", path, path)
		}
	}
	return NewKey(raw)
}

// NewKey makes a Key of 32 raw bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != 32 {
		return nil, fmt.Errorf("secrets key: %d bytes, want 32", len(raw))
	}
	blk, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	return &Key{aead: aead, ID: hex.EncodeToString(sum[:8])}, nil
}

func aad(tenantID, name string) []byte {
	return []byte("bc-secret-at-rest-v1\n" + tenantID + "\n" + name + "\n")
}

// PGStore keeps secrets in PostgreSQL (migration 0045), encrypted under Key.
type PGStore struct {
	Pool *pgxpool.Pool
	Key  *Key
}

var _ Store = (*PGStore)(nil)

// Put stores or replaces a secret.
func (s *PGStore) Put(ctx context.Context, tenantID, name string, value []byte) (Meta, error) {
	if err := checkPut(tenantID, name, value); err != nil {
		return Meta{}, err
	}
	nonce := make([]byte, s.Key.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Meta{}, err
	}
	ct := s.Key.aead.Seal(nil, nonce, value, aad(tenantID, name))
	m := Meta{TenantID: tenantID, Name: name, KeyID: s.Key.ID, ValueBytes: len(value)}
	err := s.Pool.QueryRow(ctx, `
INSERT INTO secrets (tenant_id, name, key_id, nonce, ciphertext, value_bytes)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id, name) DO UPDATE SET key_id = $3, nonce = $4, ciphertext = $5, value_bytes = $6, updated_at = now()
RETURNING created_at, updated_at`, tenantID, name, s.Key.ID, nonce, ct, len(value)).Scan(&m.CreatedAt, &m.UpdatedAt)
	if err != nil {
		if strings.Contains(err.Error(), "secrets_tenant_id_fkey") {
			return Meta{}, fmt.Errorf("%w: tenant %q does not exist", ErrNotFound, tenantID)
		}
		return Meta{}, fmt.Errorf("storing secret %s: %w", name, err)
	}
	return m, nil
}

// List returns the tenant's secrets by name.
func (s *PGStore) List(ctx context.Context, tenantID string) ([]Meta, error) {
	rows, err := s.Pool.Query(ctx, `SELECT tenant_id, name, key_id, value_bytes, created_at, updated_at FROM secrets WHERE tenant_id = $1 ORDER BY name`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Meta, error) {
		var m Meta
		err := r.Scan(&m.TenantID, &m.Name, &m.KeyID, &m.ValueBytes, &m.CreatedAt, &m.UpdatedAt)
		return m, err
	})
}

// Delete removes a secret; false when there was none.
func (s *PGStore) Delete(ctx context.Context, tenantID, name string) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `DELETE FROM secrets WHERE tenant_id = $1 AND name = $2`, tenantID, name)
	if err != nil {
		return false, fmt.Errorf("deleting secret %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Value decrypts a secret.
func (s *PGStore) Value(ctx context.Context, tenantID, name string) ([]byte, error) {
	var keyID string
	var nonce, ct []byte
	err := s.Pool.QueryRow(ctx, `SELECT key_id, nonce, ciphertext FROM secrets WHERE tenant_id = $1 AND name = $2`, tenantID, name).Scan(&keyID, &nonce, &ct)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", name, err)
	}
	if keyID != s.Key.ID {
		return nil, fmt.Errorf("secret %s is encrypted under key %s, and the server holds key %s: put it again under the current key", name, keyID, s.Key.ID)
	}
	v, err := s.Key.aead.Open(nil, nonce, ct, aad(tenantID, name))
	if err != nil {
		return nil, fmt.Errorf("secret %s does not decrypt (altered, or moved from another name): %w", name, err)
	}
	return v, nil
}
