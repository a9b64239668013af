// Package flagcompat keeps a command's old flag spellings working for one
// release, each with a warning that names the new form: flags, like
// configuration keys and wire fields, are contracts, and an old unit file
// or script must keep starting the service while its owner is told the fix.
package flagcompat

import (
	"strings"

	"github.com/spf13/pflag"
)

// Rewrite is one argument rewritten from an old spelling to the new one.
type Rewrite struct {
	// Old is the argument as given ("-config", "-grpc-listen=:1").
	Old string
	// New is what it was rewritten to ("--config", "--grpc-listen=:1").
	New string
}

// Warning says, for a log line or stderr, that Old still works for this
// release and what to write instead.
func (r Rewrite) Warning() string {
	name, _, _ := strings.Cut(r.Old, "=")
	newName, _, _ := strings.Cut(r.New, "=")
	return "flag " + name + " is deprecated and is accepted for one more release: use " + newName
}

// SingleDash rewrites each long flag of fs spelt with one dash, as Go's flag
// package allowed (-config, -config=x), to its two-dash form, which pflag
// would otherwise read as a cluster of one-letter flags. It leaves alone
// one-letter flags (-v), arguments that name no long flag of fs, the value
// that follows a flag needing one, and everything after "--".
func SingleDash(fs *pflag.FlagSet, args []string) ([]string, []Rewrite) {
	out := make([]string, 0, len(args))
	var rewrites []Rewrite
	takesValue := false
	for i, a := range args {
		if takesValue {
			takesValue = false
			out = append(out, a)
			continue
		}
		if a == "--" {
			return append(out, args[i:]...), rewrites
		}
		switch {
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			if f := fs.Lookup(name); f != nil && !hasValue && f.NoOptDefVal == "" {
				takesValue = true
			}
		case strings.HasPrefix(a, "-") && len(a) > 2:
			name, _, hasValue := strings.Cut(a[1:], "=")
			if f := fs.Lookup(name); f != nil && len(name) > 1 {
				r := Rewrite{Old: a, New: "-" + a}
				rewrites = append(rewrites, r)
				a = r.New
				takesValue = !hasValue && f.NoOptDefVal == ""
			}
		}
		out = append(out, a)
	}
	return out, rewrites
}
