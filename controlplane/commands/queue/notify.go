package queue

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// dispatchChannel is the NOTIFY channel of migration 0002's triggers: a new
// command, a cancel request or a requeue sends the node id, a new spec
// generation "spec:" and the node id.
const (
	dispatchChannel = "bc_dispatch"
	specPrefix      = "spec:"
	// CertsPrefix and the node id is sent when a node's certificates
	// changed (a re-join superseded one, an operator revoked one): its
	// sessions check theirs again.
	CertsPrefix = "certs:"
)

// Wakeup is one dispatch notification: the node whose session should look at
// its commands, and whether a new spec generation or a change of its
// certificates is the reason.
type Wakeup struct {
	NodeID string
	Spec   bool
	Certs  bool
}

// NotifyCerts wakes the sessions of nodeID to check their certificates
// again, when tx commits.
func NotifyCerts(ctx context.Context, tx DBTX, nodeID string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, dispatchChannel, CertsPrefix+nodeID); err != nil {
		return fmt.Errorf("notifying a certificate change of %s: %w", nodeID, err)
	}
	return nil
}

// ListenDispatch subscribes conn to dispatch wake-ups. Hold the connection
// (outside any pool use) and call WaitDispatch on it.
func ListenDispatch(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "LISTEN "+dispatchChannel); err != nil {
		return fmt.Errorf("listening on %s: %w", dispatchChannel, err)
	}
	return nil
}

// WaitDispatch waits for the next dispatch wake-up on a connection that
// ListenDispatch subscribed. A notification is a hint: the session reads
// the rows itself.
func WaitDispatch(ctx context.Context, conn *pgx.Conn) (Wakeup, error) {
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		return Wakeup{}, fmt.Errorf("waiting for a dispatch notification: %w", err)
	}
	if node, ok := strings.CutPrefix(n.Payload, specPrefix); ok {
		return Wakeup{NodeID: node, Spec: true}, nil
	}
	if node, ok := strings.CutPrefix(n.Payload, CertsPrefix); ok {
		return Wakeup{NodeID: node, Certs: true}, nil
	}
	return Wakeup{NodeID: n.Payload}, nil
}

// NodeDeletedChannel is the NOTIFY channel on which DeleteNode announces a
// deleted node's id, so that every gateway closes the node's sessions.
const NodeDeletedChannel = "bc_node_deleted"

// ListenNodeDeleted subscribes conn to node deletions. Hold the connection
// (outside any pool use) and call WaitNodeDeleted on it.
func ListenNodeDeleted(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "LISTEN "+NodeDeletedChannel); err != nil {
		return fmt.Errorf("listening on %s: %w", NodeDeletedChannel, err)
	}
	return nil
}

// WaitNodeDeleted waits for the next node deletion on a connection that
// ListenNodeDeleted subscribed and returns the node's id.
func WaitNodeDeleted(ctx context.Context, conn *pgx.Conn) (string, error) {
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		return "", fmt.Errorf("waiting for a node deletion: %w", err)
	}
	return n.Payload, nil
}
