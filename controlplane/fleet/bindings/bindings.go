// Package bindings tracks the GPU bindings a node spec makes: with
// pki.commandSigning, an allocation whose holds bind GPUs on a node goes
// active only once the node's own signed AllocationBound verifies against
// the node's current certificate. Each allocation shows its state: pending
// (the spec is set, the node has not attested it), bound (with the node's
// signature) or refused (a statement that did not verify, and why).
package bindings

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/internal/trust"
	"github.com/better-compute/commands/sdk/nodespec"
)

// The binding states.
const (
	StatePending = "pending"
	StateBound   = "bound"
	StateRefused = "refused"
)

// Binding is one allocation's binding on a node.
type Binding struct {
	NodeID     string
	Allocation string
	Generation int64
	GPUs       []string
	State      string
	Reason     string
	Statement  []byte
	NodeSig    []byte
	UpdatedAt  time.Time
}

// Allocations are the allocations a spec's live holds bind, each with its
// physical GPUs (sorted, unique): what the node's AllocationBound must name.
func Allocations(s nodespec.Spec) map[string][]string {
	out := map[string][]string{}
	for _, h := range s.Holds {
		if h.State != nodespec.HoldLive || h.Allocation == "" || h.GPU == "" {
			continue
		}
		if !slices.Contains(out[h.Allocation], h.GPU) {
			out[h.Allocation] = append(out[h.Allocation], h.GPU)
		}
	}
	for _, g := range out {
		sort.Strings(g)
	}
	return out
}

// Pending records the allocations of a new spec generation as pending, in
// the transaction that stores the generation.
func Pending(ctx context.Context, tx pgx.Tx, nodeID string, generation int64, spec nodespec.Spec) error {
	for alloc, gpus := range Allocations(spec) {
		if _, err := tx.Exec(ctx, `
			INSERT INTO allocation_bindings (node_id, allocation, generation, gpus, state)
			VALUES ($1, $2, $3, $4, 'pending')
			ON CONFLICT (node_id, allocation) DO UPDATE SET generation = $3, gpus = $4, state = 'pending', reason = '',
			  statement = NULL, node_sig = NULL, updated_at = now()`, nodeID, alloc, generation, gpus); err != nil {
			return fmt.Errorf("recording the binding of %s on %s: %w", alloc, nodeID, err)
		}
	}
	return nil
}

// ErrMismatch is a statement that verifies but names what the control
// plane did not bind (other GPUs, another generation, an allocation the
// spec does not hold).
var ErrMismatch = errors.New("the statement does not match the binding the spec made")

// Attest verifies a node's AllocationBound against its certificate (issued
// by nodeCA and naming the node) and, when it matches the pending binding,
// marks the allocation bound; a statement that does not verify or does not
// match marks it refused with why. It returns the binding as stored.
func Attest(ctx context.Context, db store.DBTX, nodeID string, nodeCA *x509.CertPool, cert *x509.Certificate, statement, sig []byte, now time.Time) (Binding, error) {
	ab, err := trust.DecodeAllocationBound(statement)
	if err != nil {
		return Binding{}, err
	}
	var b Binding
	err = db.QueryRow(ctx, `SELECT generation, gpus, state FROM allocation_bindings WHERE node_id = $1 AND allocation = $2`, nodeID, ab.Allocation).
		Scan(&b.Generation, &b.GPUs, &b.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return Binding{}, fmt.Errorf("allocation %s on %s: %w: no spec binds it", ab.Allocation, nodeID, ErrMismatch)
	}
	if err != nil {
		return Binding{}, fmt.Errorf("reading the binding of %s on %s: %w", ab.Allocation, nodeID, err)
	}
	verr := verify(nodeCA, cert, ab, nodeID, b, statement, sig, now)
	state, reason := StateBound, ""
	if verr != nil {
		state, reason = StateRefused, verr.Error()
	}
	if _, err := db.Exec(ctx, `
		UPDATE allocation_bindings SET state = $3, reason = $4, statement = $5, node_sig = $6, updated_at = now()
		WHERE node_id = $1 AND allocation = $2 AND generation = $7 AND state <> 'bound'`,
		nodeID, ab.Allocation, state, reason, statement, sig, b.Generation); err != nil {
		return Binding{}, fmt.Errorf("storing the binding of %s on %s: %w", ab.Allocation, nodeID, err)
	}
	b.NodeID, b.Allocation, b.State, b.Reason, b.Statement, b.NodeSig = nodeID, ab.Allocation, state, reason, statement, sig
	return b, verr
}

func verify(nodeCA *x509.CertPool, cert *x509.Certificate, ab trust.AllocationBound, nodeID string, b Binding, statement, sig []byte, now time.Time) error {
	if _, err := cert.Verify(x509.VerifyOptions{Roots: nodeCA, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	id, err := trust.IdentityOf(cert)
	if err != nil {
		return err
	}
	if id.NodeID != nodeID || ab.NodeID != nodeID {
		return fmt.Errorf("%w: statement for node %q by %q's certificate", ErrMismatch, ab.NodeID, id.NodeID)
	}
	if err := trust.VerifyWith(cert.PublicKey, trust.PurposeAllocationBound, statement, sig); err != nil {
		return fmt.Errorf("allocation-bound signature: %w", err)
	}
	gpus := append([]string(nil), ab.GPUs...)
	sort.Strings(gpus)
	if ab.Generation != b.Generation || !slices.Equal(gpus, b.GPUs) {
		return fmt.Errorf("%w: generation %d with GPUs %v, the spec bound generation %d with %v", ErrMismatch, ab.Generation, gpus, b.Generation, b.GPUs)
	}
	return nil
}

// List returns the node's bindings, by allocation.
func List(ctx context.Context, db store.DBTX, nodeID string) ([]Binding, error) {
	rows, err := db.Query(ctx, `SELECT node_id, allocation, generation, gpus, state, reason, statement, node_sig, updated_at
		FROM allocation_bindings WHERE node_id = $1 ORDER BY allocation`, nodeID)
	if err != nil {
		return nil, fmt.Errorf("listing the bindings of %s: %w", nodeID, err)
	}
	defer rows.Close()
	var out []Binding
	for rows.Next() {
		var b Binding
		if err := rows.Scan(&b.NodeID, &b.Allocation, &b.Generation, &b.GPUs, &b.State, &b.Reason, &b.Statement, &b.NodeSig, &b.UpdatedAt); err != nil {
			return nil, fmt.Errorf("reading bindings: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
