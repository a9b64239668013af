// Package labels is the grammar of node labels and of the selectors fleet
// runs and node lists choose nodes by, and the SQL that stores labels and
// compiles a selector into a condition on the nodes table. Labels are
// key=value pairs as Kubernetes has them (an optional DNS-style prefix and
// a slash, then a name of up to 63 characters); a selector is a
// comma-separated list of requirements, all of which a node must meet.
package labels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// MaxPerNode bounds a node's labels.
const MaxPerNode = 64

// MaxNameLen bounds a key's name part and a value.
const MaxNameLen = 63

// MaxPrefixLen bounds a key's DNS-style prefix.
const MaxPrefixLen = 253

// Grammar says the key grammar in words, for errors and docs.
const Grammar = "a name of 1 to 63 characters [A-Za-z0-9._-] that starts and ends with a letter or digit, optionally after a DNS-style prefix and a slash (site.example/rack)"

func invalid(field, format string, args ...any) error {
	return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-" + field, Message: fmt.Sprintf(format, args...),
		Details: map[string]string{"field": field}}
}

// CheckKey checks a label key against Grammar.
func CheckKey(key string) error {
	if key == "" {
		return invalid("labels", "a label key is empty: want %s", Grammar)
	}
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		if err := checkPrefix(prefix); err != nil {
			return invalid("labels", "label key %q: prefix %v", key, err)
		}
		name = rest
	}
	if err := checkName(name, false); err != nil {
		return invalid("labels", "label key %q: %v; want %s", key, err, Grammar)
	}
	return nil
}

// CheckValue checks a label value: empty, or a name as a key's.
func CheckValue(key, value string) error {
	if err := checkName(value, true); err != nil {
		return invalid("labels", "label %s's value %q: %v; want up to 63 characters [A-Za-z0-9._-] that start and end with a letter or digit, or nothing", key, value, err)
	}
	return nil
}

func checkName(s string, emptyOK bool) error {
	if s == "" {
		if emptyOK {
			return nil
		}
		return fmt.Errorf("the name is empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%d characters long, at most %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum {
			continue
		}
		if (c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1 {
			continue
		}
		return fmt.Errorf("character %q at %d is not allowed there", c, i)
	}
	return nil
}

func checkPrefix(p string) error {
	if p == "" || len(p) > MaxPrefixLen {
		return fmt.Errorf("%q must be 1 to %d characters", p, MaxPrefixLen)
	}
	for _, part := range strings.Split(p, ".") {
		if part == "" || len(part) > 63 {
			return fmt.Errorf("%q is not a DNS name", p)
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(part)-1 {
				continue
			}
			return fmt.Errorf("%q is not a lower-case DNS name", p)
		}
	}
	return nil
}

// Change is a change to a node's labels: Set adds or changes, Remove
// deletes, Replace makes Set the whole set.
type Change struct {
	Set     map[string]string
	Remove  []string
	Replace bool
}

// Validate checks every key and value of c, and that no key is both set
// and removed.
func (c Change) Validate() error {
	if len(c.Set) == 0 && len(c.Remove) == 0 && !c.Replace {
		return invalid("labels", "nothing to change: give labels to set, keys to remove, or replace")
	}
	for _, k := range slices.Sorted(maps.Keys(c.Set)) {
		if err := CheckKey(k); err != nil {
			return err
		}
		if err := CheckValue(k, c.Set[k]); err != nil {
			return err
		}
	}
	for _, k := range c.Remove {
		if err := CheckKey(k); err != nil {
			return err
		}
		if _, ok := c.Set[k]; ok {
			return invalid("labels", "label %q is both set and removed", k)
		}
	}
	if len(c.Set) > MaxPerNode {
		return invalid("labels", "%d labels given; a node carries at most %d", len(c.Set), MaxPerNode)
	}
	return nil
}

// Apply returns cur changed by c (cur is not modified).
func (c Change) Apply(cur map[string]string) map[string]string {
	out := map[string]string{}
	if !c.Replace {
		maps.Copy(out, cur)
	}
	maps.Copy(out, c.Set)
	for _, k := range c.Remove {
		delete(out, k)
	}
	return out
}

// String writes labels as k=v pairs sorted by key, for tables.
func String(l map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(l)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return b.String()
}
