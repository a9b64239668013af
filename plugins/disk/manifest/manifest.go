// Package manifest holds the disk plugin's manifests, disk.wipe and
// deploy: the Go values that bc-kind-disk serves and the control plane's
// registry imports. It imports only sdk/kind.
package manifest

import (
	"encoding/json"
	"time"

	"github.com/better-compute/commands/sdk/kind"
)

// The kinds this plugin serves.
const (
	WipeKind   = "disk.wipe"
	DeployKind = "disk.deploy"
)

// Roles are where the disk kinds run: on the machine itself, a node or a
// discovery ramdisk's restricted identity, never on a site agent (which
// runs the BMC kinds and reaches no local disk of the machine).
var Roles = []string{"node", "discovery"}

// WipeManifest is disk.wipe's manifest.
//
// The provision lane: a wipe takes minutes to hours and must not hold a
// control slot. Destructive, so with approver keys it needs an approved
// batch. Attested: bcd signs the wipe record with the node key, and the
// metal module's nodeSignedResults() verifies it before it acts on it (a
// machine is released only on a wipe that verifies). Not retry-safe: after
// a daemon crash it fails interrupted, and its owner decides, since a
// half-run ATA erase leaves a password set that a blind rerun would trip
// over. The timeout covers an ATA enhanced erase of a large spinning disk.
var WipeManifest = kind.Manifest{
	Kind:        WipeKind,
	Lane:        kind.LaneProvision,
	Timeout:     kind.Duration(12 * time.Hour),
	Roles:       Roles,
	Flags:       kind.Flags{Destructive: true, Attested: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["device", "mode"],
  "properties": {
    "device": {"type": "string", "pattern": "^/dev/[A-Za-z0-9._/-]+$", "description": "the whole disk, /dev/nvme0n1 or /dev/disk/by-id/…"},
    "mode": {"enum": ["metadata", "overwrite", "nvme-format", "nvme-sanitize", "ata-secure-erase", "scsi-sanitize"], "description": "metadata removes signatures and partition tables only and is never reported as a wipe"},
    "samples": {"type": "integer", "minimum": 1, "maximum": 4096, "description": "random blocks the readback reads (default 32)"}
  }
}`),
	Version:     "1.0.0",
	Description: "Wipe a whole disk (metadata, overwrite, NVMe format/sanitize, ATA secure erase, SCSI sanitize) and return a signed record with the drive's identity, method, post-state and a sampled readback",
}

// DeployManifest is disk.deploy's manifest (the "deploy": kind names are dotted words).
//
// The provision lane, destructive (it overwrites a disk). Not retry-safe:
// a crash leaves a partial image that the owner must decide about. The
// timeout covers a large image over a slow link.
var DeployManifest = kind.Manifest{
	Kind:        DeployKind,
	Lane:        kind.LaneProvision,
	Timeout:     kind.Duration(4 * time.Hour),
	Roles:       Roles,
	Flags:       kind.Flags{Destructive: true},
	APIRunnable: true,
	PayloadSchema: json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["url", "device", "sha256"],
  "properties": {
    "url": {"type": "string", "pattern": "^https?://", "maxLength": 4096, "description": "where the image is served"},
    "device": {"type": "string", "pattern": "^/dev/[A-Za-z0-9._/-]+$", "description": "the whole disk to write"},
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "SHA-256 of the file the URL serves (compressed, as sha256sum prints it)"},
    "compression": {"enum": ["auto", "none", "xz", "zstd"], "description": "auto (default) reads the stream's magic"},
    "authorizationSecretRef": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$", "description": "a secretRef of the command whose value is sent as the Authorization header"}
  }
}`),
	Version:     "1.0.0",
	Description: "Write an image from a URL to a whole disk (xz, zstd), refusing a wrong digest or a truncated image, and verify it by readback",
}
