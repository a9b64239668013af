// Package archive is the command history archive's format and its
// reading: one object per tenant and hour,
// history/{tenant}/{yyyy}/{mm}/{dd}/{hh}.jsonl.zst, zstd-compressed JSON
// lines, each a Record holding one row as PostgreSQL's to_jsonb wrote it,
// and beside the objects history/{tenant}/manifest.json listing each object
// with its counts, hour and SHA-256, which readers check (Search, Export).
//
// It is apart from the archiver (package history, which reads and deletes
// rows in PostgreSQL) so that the CLI, which reads archives copied down by
// an auditor, links no database driver: internal/depcheck holds that wall.
package archive

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// FleetDir is the archive's directory for rows of no tenant: the fleet's
// events (an empty tenant_id) and River's jobs. Tenant ids never start with "_".
const FleetDir = "_fleet"

// ManifestName is the manifest's file name under history/{tenant}/.
const ManifestName = "manifest.json"

// The record types.
const (
	TypeCommand = "command"
	TypeEvent   = "event"
	TypeJob     = "job"
)

// Record is one line of an archive object: a row of commands, outbox or
// river_job, as to_jsonb wrote it (column names as keys).
type Record struct {
	Type string          `json:"type"`
	Row  json.RawMessage `json:"row"`
}

// Manifest lists a tenant's archive objects.
type Manifest struct {
	// Tenant is the tenant id ("" for the fleet's).
	Tenant string `json:"tenant"`
	// Objects are sorted by Hour.
	Objects []ObjectEntry `json:"objects"`
}

// ObjectEntry describes one archive object.
type ObjectEntry struct {
	// Key is the object's key in the blob store.
	Key string `json:"key"`
	// Hour is the start of the hour the object holds (UTC); its rows were
	// settled (commands), created (events) or finalized (jobs) in
	// [Hour, Hour+1h).
	Hour time.Time `json:"hour"`
	// Commands, Events and Jobs count the object's records.
	Commands int `json:"commands"`
	Events   int `json:"events"`
	Jobs     int `json:"jobs"`
	// Bytes is the object's size, SHA256 its digest (hex).
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Dir is the archive directory of tenant.
func Dir(tenant string) string {
	if tenant == "" {
		return "history/" + FleetDir
	}
	return "history/" + tenant
}

// TenantOfDir is Dir's inverse on its last segment.
func TenantOfDir(seg string) string {
	if seg == FleetDir {
		return ""
	}
	return seg
}

// ObjectKey is where tenant's hour is archived.
func ObjectKey(tenant string, hour time.Time) string {
	h := hour.UTC()
	return fmt.Sprintf("%s/%04d/%02d/%02d/%02d.jsonl.zst", Dir(tenant), h.Year(), h.Month(), h.Day(), h.Hour())
}

// ManifestKey is where tenant's manifest is.
func ManifestKey(tenant string) string { return Dir(tenant) + "/" + ManifestName }

// CheckTenant refuses a tenant id that cannot name an archive directory.
func CheckTenant(tenant string) error {
	if strings.HasPrefix(tenant, "_") || strings.ContainsAny(tenant, "/\\") || tenant == "." || tenant == ".." {
		return fmt.Errorf("tenant %q: cannot name an archive directory", tenant)
	}
	return nil
}

// Entry finds hour's entry in m.
func (m *Manifest) Entry(hour time.Time) (int, bool) {
	for i, e := range m.Objects {
		if e.Hour.Equal(hour) {
			return i, true
		}
	}
	return -1, false
}

// Set adds or replaces e, keeping Objects sorted by hour.
func (m *Manifest) Set(e ObjectEntry) {
	if i, ok := m.Entry(e.Hour); ok {
		m.Objects[i] = e
		return
	}
	i := len(m.Objects)
	for i > 0 && m.Objects[i-1].Hour.After(e.Hour) {
		i--
	}
	m.Objects = append(m.Objects, ObjectEntry{})
	copy(m.Objects[i+1:], m.Objects[i:])
	m.Objects[i] = e
}
