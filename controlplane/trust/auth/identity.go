package auth

import "strings"

// Identity is an authenticated caller.
type Identity struct {
	// Name is the identity's name from the config file.
	Name string
	// Tenants are the tenant patterns the identity sees.
	Tenants []string
	// Grants are the identity's grants.
	Grants []Grant
	// Agent marks an agent's principal (the MCP server's): it may propose
	// batches but never approve one, whatever it is granted.
	Agent bool
}

// SeesTenant reports whether the identity sees tenantID's nodes.
func (i *Identity) SeesTenant(tenantID string) bool {
	if i == nil || tenantID == "" {
		return false
	}
	for _, p := range i.Tenants {
		if Match(p, tenantID) {
			return true
		}
	}
	return false
}

// Allowed reports whether a grant allows permission on resource.
func (i *Identity) Allowed(permission, resource string) bool {
	if i == nil {
		return false
	}
	for _, g := range i.Grants {
		res := g.Resource
		if res == "" {
			res = "*"
		}
		if Match(g.Permission, permission) && Match(res, resource) {
			return true
		}
	}
	return false
}

// Match reports whether s matches pattern, where * matches any run of
// characters (including none, and including '/' and ':'): "compute:nodes:*"
// matches "compute:nodes:exec", "compute-node/*" every node.
func Match(pattern, s string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == s
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last) && len(s) >= len(last)
}

// ResourcePatterns returns the resource patterns of the grants that allow
// permission, for a list that filters in the database what Allowed would
// decide row by row: nil when one of them matches every resource that
// starts with prefix ("*", or prefix followed by "*"), and an empty
// non-nil slice when no grant allows permission at all.
func (i *Identity) ResourcePatterns(permission, prefix string) []string {
	out := []string{}
	if i == nil {
		return out
	}
	for _, g := range i.Grants {
		if !Match(g.Permission, permission) {
			continue
		}
		res := g.Resource
		if res == "" || res == "*" || res == prefix+"*" {
			return nil
		}
		out = append(out, res)
	}
	return out
}
