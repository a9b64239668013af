package kind

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/Masterminds/semver/v3"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Lane names the worker pool a kind runs in. Lanes bound the work in flight per
// node: the gateway keeps at most 8 control, 4 provision and 2 bulk commands
// outstanding per session, and bcd runs each lane on its own fixed pool.
type Lane string

// The three lanes.
const (
	LaneControl   Lane = "control"
	LaneProvision Lane = "provision"
	LaneBulk      Lane = "bulk"
)

// Lanes lists every lane in a fixed order.
var Lanes = []Lane{LaneControl, LaneProvision, LaneBulk}

// Valid reports whether l is one of the three lanes.
func (l Lane) Valid() bool {
	return l == LaneControl || l == LaneProvision || l == LaneBulk
}

// Flags are a kind's wire flags.
type Flags struct {
	// RetrySafe kinds run again after a daemon crash; others fail with interrupted.
	RetrySafe bool `json:"retrySafe,omitempty"`
	// Destructive kinds need an approved batch once approver keys are configured.
	Destructive bool `json:"destructive,omitempty"`
	// SelfTerminating kinds end the daemon (a reboot); a new boot id completes them.
	SelfTerminating bool `json:"selfTerminating,omitempty"`
	// Attested kinds have their result signed with the node key.
	Attested bool `json:"attested,omitempty"`
}

// Manifest describes one command kind. The same value is served by the plugin
// binary and registered by the control plane, so the two never disagree.
type Manifest struct {
	// Kind is the kind's name, lower-case dotted words: "diag.nvml".
	Kind string `json:"kind"`
	// Lane is the worker pool the kind runs in.
	Lane Lane `json:"lane"`
	// Timeout bounds one run on the node; the control plane fails a dispatched
	// command past not_after plus this timeout.
	Timeout Duration `json:"timeout"`
	// Roles are the agent roles that may run the kind ("node", "discovery").
	Roles []string `json:"roles"`
	// Flags are the wire flags.
	Flags Flags `json:"flags"`
	// APIRunnable says whether commands.run accepts the kind.
	APIRunnable bool `json:"apiRunnable,omitempty"`
	// PayloadSchema is a JSON Schema (draft 2020-12) the payload must satisfy.
	PayloadSchema json.RawMessage `json:"payloadSchema,omitempty"`
	// Version is the kind's semantic version.
	Version string `json:"version"`
	// Description is one line for `bcd kinds` and the kind reference.
	Description string `json:"description,omitempty"`
	// CompatibleVersions is a semantic-version range (">=1.0.0 <2.0.0",
	// "^1.0", "1.x") of this kind's versions that may serve its commands in
	// place of this manifest: while a fleet upgrades, the control plane
	// dispatches to a node that runs a version in the range of a registered
	// manifest although it does not know that version's digest yet, so a
	// node upgraded before the registry runs its commands (they would wait,
	// blocked, otherwise). Empty: only this exact manifest (its digest).
	// Declare it only for versions that take the same payloads and keep the
	// lane, timeout, roles and flags.
	CompatibleVersions string `json:"compatibleVersions,omitempty"`
}

// Duration is a time.Duration that reads and writes JSON as "90s".
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string ("90s", "15m").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

var (
	kindPattern    = regexp.MustCompile(`^[a-z][a-z0-9]*(\.[a-z][a-zA-Z0-9]*)+$`)
	rolePattern    = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	versionPattern = regexp.MustCompile(`^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$`)
)

// MaxTimeout is the longest timeout a manifest may declare.
const MaxTimeout = 24 * time.Hour

// Validate reports every problem with the manifest, each naming the field.
func (m Manifest) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !kindPattern.MatchString(m.Kind) {
		bad("kind %q: must be lower-case dotted words such as \"diag.nvml\"", m.Kind)
	}
	if !m.Lane.Valid() {
		bad("%s: lane %q: must be one of control, provision, bulk", m.name(), m.Lane)
	}
	if m.Timeout.D() <= 0 || m.Timeout.D() > MaxTimeout {
		bad("%s: timeout %s: must be above 0 and at most %s", m.name(), m.Timeout.D(), MaxTimeout)
	}
	if len(m.Roles) == 0 {
		bad("%s: roles: must name at least one agent role such as \"node\"", m.name())
	}
	for _, r := range m.Roles {
		if !rolePattern.MatchString(r) {
			bad("%s: role %q: must be lower-case letters, digits and dashes", m.name(), r)
		}
	}
	if !versionPattern.MatchString(m.Version) {
		bad("%s: version %q: must be a semantic version such as 1.0.0", m.name(), m.Version)
	}
	if m.CompatibleVersions != "" {
		if _, err := semver.NewConstraint(m.CompatibleVersions); err != nil {
			bad("%s: compatibleVersions %q: must be a version range such as \">=1.0.0 <2.0.0\" or \"^1.0\": %v", m.name(), m.CompatibleVersions, err)
		}
	}
	if m.Flags.SelfTerminating && m.Flags.RetrySafe {
		bad("%s: flags: a self-terminating kind cannot be retry-safe (it would run twice across a reboot)", m.name())
	}
	if len(m.PayloadSchema) > 0 {
		if _, err := m.CompileSchema(); err != nil {
			bad("%s: payloadSchema: %w", m.name(), err)
		}
	}
	return errors.Join(errs...)
}

func (m Manifest) name() string {
	if m.Kind == "" {
		return "manifest"
	}
	return "kind " + m.Kind
}

// CompileSchema compiles the payload schema. A manifest without a schema
// accepts any JSON object.
func (m Manifest) CompileSchema() (*jsonschema.Schema, error) {
	raw := m.PayloadSchema
	if len(raw) == 0 {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	url := "mem://" + m.Kind + ".schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("adding schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compiling schema: %w", err)
	}
	return s, nil
}

// Digest is the SHA-256 of the manifest's canonical JSON, hex encoded. bcd
// reports it in Hello; the gateway dispatches a kind only to a node whose
// digest matches the registry's. The payload schema is canonicalised the
// way RFC 8785 does (object keys sorted, no insignificant space, numbers in
// their shortest ES6 form, no HTML escaping), and the roles are sorted, so
// a manifest written as YAML or JSON, pretty or compact, in any key order,
// hashes the same on the node and in the registry.
func (m Manifest) Digest() string {
	c := m
	c.Roles = append([]string(nil), m.Roles...)
	sort.Strings(c.Roles)
	if len(c.PayloadSchema) > 0 {
		if canon, err := CanonicalJSON(c.PayloadSchema); err == nil {
			c.PayloadSchema = canon
		}
	}
	b, err := canonicalMarshal(c)
	if err != nil {
		b, _ = json.Marshal(c)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CanonicalJSON re-encodes a JSON document in canonical form: object keys
// sorted, no insignificant whitespace, numbers as encoding/json writes a
// float64 (the shortest form that round-trips, as ES6 and RFC 8785 do),
// strings without HTML escaping. Two documents that mean the same have the
// same canonical form.
func CanonicalJSON(b []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return canonicalMarshal(v)
}

func canonicalMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// AllowsRole reports whether an agent of role may run the kind.
func (m Manifest) AllowsRole(role string) bool {
	for _, r := range m.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// String names the manifest for logs.
func (m Manifest) String() string {
	return fmt.Sprintf("%s@%s (%s, %s)", m.Kind, m.Version, m.Lane, strings.TrimSpace(m.Timeout.D().String()))
}
