package labels

import (
	"fmt"
	"slices"
	"strings"
)

// Op is a requirement's operator.
type Op string

// The operators of a selector's requirements.
const (
	OpEquals    Op = "="
	OpNotEquals Op = "!="
	OpIn        Op = "in"
	OpNotIn     Op = "notin"
	OpExists    Op = "exists"
	OpNotExists Op = "!"
)

// Requirement is one condition of a selector.
type Requirement struct {
	Key    string
	Op     Op
	Values []string
}

// Selector is a parsed selector: a node matches when it meets every
// requirement. The zero Selector matches every node.
type Selector struct {
	Requirements []Requirement
}

// MaxSelectorLen bounds a selector's text.
const MaxSelectorLen = 4096

// SelectorGrammar says the grammar in words, for errors and docs.
const SelectorGrammar = "comma-separated requirements, each key=value, key!=value, key in (v1,v2), key notin (v1,v2), key (the label exists) or !key (it does not)"

// Parse parses a selector such as "gpu=h200,rack in (r1,r2),!drain". An
// empty string is the zero Selector. Keys and values follow the label
// grammar; an error names the requirement that does not parse.
func Parse(s string) (Selector, error) {
	if len(s) > MaxSelectorLen {
		return Selector{}, invalid("selector", "selector is %d bytes long; at most %d", len(s), MaxSelectorLen)
	}
	var sel Selector
	rest := strings.TrimSpace(s)
	for rest != "" {
		part, tail, err := nextRequirement(rest)
		if err != nil {
			return Selector{}, invalid("selector", "selector %q: %v; want %s", s, err, SelectorGrammar)
		}
		r, err := parseRequirement(part)
		if err != nil {
			return Selector{}, invalid("selector", "selector %q: requirement %q: %v; want %s", s, strings.TrimSpace(part), err, SelectorGrammar)
		}
		sel.Requirements = append(sel.Requirements, r)
		rest = tail
	}
	return sel, nil
}

// nextRequirement splits s at the first comma outside parentheses.
func nextRequirement(s string) (part, rest string, err error) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
			if depth > 1 {
				return "", "", fmt.Errorf("nested parentheses at %d", i)
			}
		case ')':
			depth--
			if depth < 0 {
				return "", "", fmt.Errorf("')' at %d without '('", i)
			}
		case ',':
			if depth == 0 {
				rest = strings.TrimSpace(s[i+1:])
				if rest == "" {
					return "", "", fmt.Errorf("a trailing comma")
				}
				return s[:i], rest, nil
			}
		}
	}
	if depth != 0 {
		return "", "", fmt.Errorf("'(' without ')'")
	}
	return s, "", nil
}

func parseRequirement(p string) (Requirement, error) {
	p = strings.TrimSpace(p)
	if p == "" {
		return Requirement{}, fmt.Errorf("an empty requirement")
	}
	if key, ok := strings.CutPrefix(p, "!"); ok {
		key = strings.TrimSpace(key)
		if err := CheckKey(key); err != nil {
			return Requirement{}, err
		}
		return Requirement{Key: key, Op: OpNotExists}, nil
	}
	if i := strings.Index(p, "!="); i >= 0 {
		return equality(p[:i], p[i+2:], OpNotEquals)
	}
	if i := strings.Index(p, "=="); i >= 0 {
		return equality(p[:i], p[i+2:], OpEquals)
	}
	if i := strings.Index(p, "="); i >= 0 {
		return equality(p[:i], p[i+1:], OpEquals)
	}
	if open := strings.Index(p, "("); open >= 0 {
		head := strings.Fields(p[:open])
		if len(head) != 2 || (head[1] != string(OpIn) && head[1] != string(OpNotIn)) {
			return Requirement{}, fmt.Errorf("want key in (…) or key notin (…)")
		}
		if !strings.HasSuffix(p, ")") {
			return Requirement{}, fmt.Errorf("text after ')'")
		}
		if err := CheckKey(head[0]); err != nil {
			return Requirement{}, err
		}
		r := Requirement{Key: head[0], Op: Op(head[1])}
		for _, v := range strings.Split(p[open+1:len(p)-1], ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				return Requirement{}, fmt.Errorf("an empty value in the list of %s", r.Key)
			}
			if err := CheckValue(r.Key, v); err != nil {
				return Requirement{}, err
			}
			if !slices.Contains(r.Values, v) {
				r.Values = append(r.Values, v)
			}
		}
		return r, nil
	}
	if strings.ContainsAny(p, " \t") {
		return Requirement{}, fmt.Errorf("want key in (…), key notin (…), key=value or a bare key")
	}
	if err := CheckKey(p); err != nil {
		return Requirement{}, err
	}
	return Requirement{Key: p, Op: OpExists}, nil
}

func equality(k, v string, op Op) (Requirement, error) {
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if err := CheckKey(k); err != nil {
		return Requirement{}, err
	}
	if err := CheckValue(k, v); err != nil {
		return Requirement{}, err
	}
	return Requirement{Key: k, Op: op, Values: []string{v}}, nil
}

// Matches reports whether labels meet every requirement; the SQL that
// SQL compiles decides the same (a test holds both to it).
func (s Selector) Matches(l map[string]string) bool {
	for _, r := range s.Requirements {
		v, has := l[r.Key]
		switch r.Op {
		case OpEquals:
			if !has || v != r.Values[0] {
				return false
			}
		case OpNotEquals:
			if has && v == r.Values[0] {
				return false
			}
		case OpIn:
			if !has || !slices.Contains(r.Values, v) {
				return false
			}
		case OpNotIn:
			if has && slices.Contains(r.Values, v) {
				return false
			}
		case OpExists:
			if !has {
				return false
			}
		case OpNotExists:
			if has {
				return false
			}
		}
	}
	return true
}

// String writes the selector back in canonical form.
func (s Selector) String() string {
	parts := make([]string, len(s.Requirements))
	for i, r := range s.Requirements {
		switch r.Op {
		case OpEquals, OpNotEquals:
			parts[i] = r.Key + string(r.Op) + r.Values[0]
		case OpIn, OpNotIn:
			parts[i] = r.Key + " " + string(r.Op) + " (" + strings.Join(r.Values, ",") + ")"
		case OpExists:
			parts[i] = r.Key
		case OpNotExists:
			parts[i] = "!" + r.Key
		}
	}
	return strings.Join(parts, ",")
}

// Keys returns the keys the selector requires to exist in some node for it
// to make sense (all but !key): an unknown one is most likely a typo.
func (s Selector) Keys() []string {
	var out []string
	for _, r := range s.Requirements {
		if r.Op != OpNotExists && !slices.Contains(out, r.Key) {
			out = append(out, r.Key)
		}
	}
	return out
}
