package auth_test

import (
	"strings"
	"testing"

	"github.com/better-compute/commands/controlplane/trust/auth"
)

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("identities:\n  - name: a\n    tenants: [\"*\"]\n    tokens: [x]\n    grants:\n      - permission: \"compute:nodes:*\"\n        resource: compute-node/*\n"))
	f.Add([]byte(`{"identities":[{"name":"a","tenants":["t"],"certCommonNames":["cn"]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := auth.ParseConfig(b)
		if err != nil {
			return
		}
		if _, err := auth.New(cfg); err != nil && !strings.Contains(err.Error(), "names both") {
			t.Fatalf("a config that parses must build: %v", err)
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("compute:nodes:*", "compute:nodes:exec")
	f.Add("a*b*b", "abb")
	f.Add("*", "")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := auth.Match(pattern, s)
		if !strings.Contains(pattern, "*") && got != (pattern == s) {
			t.Fatalf("literal %q ~ %q = %v", pattern, s, got)
		}
		if strings.Trim(pattern, "*") == "" && pattern != "" && !got {
			t.Fatalf("%q must match everything, not %q", pattern, s)
		}
		if got && !strings.HasPrefix(s, strings.SplitN(pattern, "*", 2)[0]) {
			t.Fatalf("%q matched %q without its prefix", pattern, s)
		}
	})
}
