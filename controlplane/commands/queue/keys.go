package queue

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"strconv"
	"strings"
)

// WorkflowKey is the idempotency key of a workflow step: "wf:<id>:<step>".
// A settled command with such a key wakes that workflow.
func WorkflowKey(workflowID, stepID string) string {
	return "wf:" + workflowID + ":" + stepID
}

// AcceptanceKey is the key of an acceptance run's command:
// "acceptance:<nodeId>:<attempt>:<kind>".
func AcceptanceKey(nodeID string, attempt int, kind string) string {
	return "acceptance:" + nodeID + ":" + strconv.Itoa(attempt) + ":" + kind
}

// APIKeyPrefix starts every key derived from an API caller's key.
const APIKeyPrefix = "api:"

var apiKeyEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// APIKey derives the queue's key from an API caller's key, scoped to the
// tenant and the caller's identity so that two callers never collide:
// "api:" then the lower-case base32 of the first 20 bytes (160 bits) of the
// SHA-256 over the length-prefixed triple. Length prefixes keep ("a:b", "c")
// and ("a", "b:c") apart. The support-bundle key is this without "api:".
func APIKey(tenantID, identity, callerKey string) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{tenantID, identity, callerKey} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	sum := h.Sum(nil)
	return APIKeyPrefix + strings.ToLower(apiKeyEncoding.EncodeToString(sum[:20]))
}

// SupportBundleKey is the support-bundle key of an API-derived idempotency
// key: the key without its "api:" prefix.
func SupportBundleKey(idempotencyKey string) string {
	return strings.TrimPrefix(idempotencyKey, APIKeyPrefix)
}

// FleetRunKeyPrefix starts the key of every fleet run's command.
const FleetRunKeyPrefix = "run:"

// FleetRunKey is the idempotency key of a fleet run's command on a node:
// "run:<runId>:<nodeId>". Unique per node, it is what keeps a run from
// starting a node twice, whatever crash comes between queuing the command
// and recording it.
func FleetRunKey(runID, nodeID string) string {
	return FleetRunKeyPrefix + runID + ":" + nodeID
}

// RunIDOfKey returns the fleet run a command's key names, "" for another key.
func RunIDOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, FleetRunKeyPrefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ":")
	return id
}
