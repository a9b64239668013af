package siteproxy_test

import (
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/plugins/siteproxy"
)

// FuzzCheckPath: a path the proxy accepts is absolute, names no host, has
// no dot segment, doubled or encoded slash, and is allowed by a rule only
// below the rule's prefix.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/redfish/v1/Systems", "//evil/x", "/redfish/v1/../x", "/redfish/v1/%2e%2e/", "/redfish/v1?$expand=.", "/a#b", "/redfish/v1@h", "http://h/x"} {
		f.Add(s)
	}
	rules := []site.ProxyRule{{Methods: []string{"GET"}, Path: "/redfish/v1/**"}}
	f.Fuzz(func(t *testing.T, p string) {
		got, _, err := siteproxy.CheckPath(p)
		if err != nil {
			return
		}
		require.True(t, strings.HasPrefix(got, "/"))
		require.False(t, strings.HasPrefix(got, "//"))
		require.NotContains(t, got, "%")
		clean := path.Clean(got)
		require.True(t, got == clean || got == clean+"/", "%q is not clean", got)
		if siteproxy.Allowed(rules, "GET", got) {
			require.True(t, got == "/redfish/v1" || strings.HasPrefix(got, "/redfish/v1/"), got)
		}
	})
}
