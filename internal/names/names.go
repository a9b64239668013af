// Package names is the grammar of the names that cross the system's
// boundaries: tenant, node and command ids, agent roles and kind names. The
// control plane (the API and the join service) and bcd (its config) check
// them here, so a name one side accepts is never one the other refuses. The
// strictest consumer sets the grammar: a node id travels in a certificate's
// URI SAN, an IA5String, so ids are ASCII, and a tenant or node id becomes
// part of a resource name matched by grant patterns, so ids hold no "*",
// "/" or ":".
package names

import (
	"errors"
	"fmt"
	"strings"
)

// MaxIDLen is the longest id: 128 bytes.
const MaxIDLen = 128

// IDGrammar says the id grammar in words, for error messages and docs.
const IDGrammar = "1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"

// The agent roles. A node runs the full set of its kinds; a discovery
// ramdisk inventories a machine before it is provisioned; a site agent runs
// the site's own kinds (the metal module's BMC and proxy work).
const (
	RoleNode      = "node"
	RoleDiscovery = "discovery"
	RoleSite      = "site"
)

// Roles are the agent roles, in the order docs list them.
var Roles = []string{RoleNode, RoleDiscovery, RoleSite}

// MaxKindLen is the longest kind name.
const MaxKindLen = 128

// ErrInvalid is wrapped by every refusal here.
var ErrInvalid = errors.New("invalid name")

// ID checks an id (tenant, node, command, batch) against the grammar;
// what names the id in the error ("nodeId").
func ID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s is %d bytes long; at most %d", ErrInvalid, what, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return fmt.Errorf("%w: %s %s: must be %s", ErrInvalid, what, quote(id), IDGrammar)
		}
	}
	return nil
}

// Role checks an agent role: one of Roles.
func Role(role string) error {
	for _, r := range Roles {
		if role == r {
			return nil
		}
	}
	return fmt.Errorf("%w: role %s: must be one of %s", ErrInvalid, quote(role), strings.Join(Roles, ", "))
}

// Kind checks a kind name: lower-case dotted words ("diag.nvml"), the
// grammar sdk/kind's Manifest.Validate holds every manifest to.
func Kind(name string) error {
	bad := func() error {
		return fmt.Errorf("%w: kind %s: must be lower-case dotted words such as \"diag.nvml\"", ErrInvalid, quote(name))
	}
	if len(name) > MaxKindLen {
		return fmt.Errorf("%w: kind is %d bytes long; at most %d", ErrInvalid, len(name), MaxKindLen)
	}
	words := strings.Split(name, ".")
	if len(words) < 2 {
		return bad()
	}
	for i, w := range words {
		if w == "" || w[0] < 'a' || w[0] > 'z' {
			return bad()
		}
		for j := 1; j < len(w); j++ {
			c := w[j]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && c >= 'A' && c <= 'Z'
			if !ok {
				return bad()
			}
		}
	}
	return nil
}

// quote shows a name in an error: quoted, with anything unprintable escaped,
// and cut short, so that a 100,000-byte id does not become a 100,000-byte
// log line.
func quote(s string) string {
	const show = 64
	if len(s) > show {
		return fmt.Sprintf("%+q…", s[:show])
	}
	return fmt.Sprintf("%+q", s)
}
