// Package history is the command history's retention: settled commands,
// the outbox's events and River's finished jobs older than a tenant's
// retention are archived to the support-bundle blob store, then deleted
// from the hot tables in bounded batches (Archiver), by one replica at a
// time (Runner, under a lease as the sweeper's); and the archive is read
// back (Search, Export) so a command settled a year ago can still be found
// by id, node, kind or requester.
//
// The archive is one object per tenant and hour,
// history/{tenant}/{yyyy}/{mm}/{dd}/{hh}.jsonl.zst: zstd-compressed JSON
// lines, each a Record holding one row as PostgreSQL's to_jsonb wrote it
// (every column, so nothing the audit needs is left behind): the commands
// settled in that hour, the events created in it, and for the fleet
// (tenant "", stored as _fleet) River's jobs finalized in it. Beside the
// objects, history/{tenant}/manifest.json lists each object with its
// counts, its hour and its SHA-256, which readers check.
//
// Crash safety comes from the order (object, then manifest, then the
// deletes) and from how an hour is written: the new object is the old one
// (when there is one) followed by the rows not already in it, so a rerun of
// an hour whose rows were not yet deleted writes the same bytes, and rows
// held back once (an open batch's) join their hour's object later.
package history

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

// entry finds hour's entry in m.
func (m *Manifest) entry(hour time.Time) (int, bool) {
	for i, e := range m.Objects {
		if e.Hour.Equal(hour) {
			return i, true
		}
	}
	return -1, false
}

// set adds or replaces e, keeping Objects sorted by hour.
func (m *Manifest) set(e ObjectEntry) {
	if i, ok := m.entry(e.Hour); ok {
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
