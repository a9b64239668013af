// Package secrets is the control plane's side of secretRefs: a tenant's
// secrets kept encrypted at rest under a key from a file, behind a Store
// interface another backend (a KMS, Vault) can implement later, and the
// exchange that hands a value to a node only while it runs a live command
// naming the ref, sealed to the one-time key the node made for that run.
// A value never enters a command, a log line, a result or an event.
package secrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/better-compute/commands/internal/sealed"
)

// MaxValueBytes is the largest secret value.
const MaxValueBytes = 64 << 10

// Errors of a Store.
var (
	// ErrNotFound: no secret of that name in the tenant.
	ErrNotFound = errors.New("secret not found")
	// ErrInvalid: a name or value that cannot be stored.
	ErrInvalid = errors.New("invalid secret")
)

// Meta is what may be shown of a secret: never its value.
type Meta struct {
	TenantID   string
	Name       string
	KeyID      string
	ValueBytes int
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Store keeps secrets. Implementations encrypt at rest; Value is called
// only by the exchange, for a node entitled to the value.
type Store interface {
	Put(ctx context.Context, tenantID, name string, value []byte) (Meta, error)
	List(ctx context.Context, tenantID string) ([]Meta, error)
	Delete(ctx context.Context, tenantID, name string) (bool, error)
	Value(ctx context.Context, tenantID, name string) ([]byte, error)
}

// checkPut validates a Put's arguments.
func checkPut(tenantID, name string, value []byte) error {
	if tenantID == "" {
		return fmt.Errorf("%w: tenantId is required", ErrInvalid)
	}
	if err := sealed.ValidRef(name); err != nil {
		return fmt.Errorf("%w: name: %w", ErrInvalid, err)
	}
	if len(value) == 0 || len(value) > MaxValueBytes {
		return fmt.Errorf("%w: value of %d bytes: must be 1 to %d bytes", ErrInvalid, len(value), MaxValueBytes)
	}
	return nil
}
