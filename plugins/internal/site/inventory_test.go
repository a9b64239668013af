package site_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/internal/site"
)

const example = `
bmcs:
  - id: rack4-u12
    machine: node_m1
    address: 10.20.4.12
    providers: [redfish, ipmi]
    redfish: {port: 443, system: 437XR1138R2, caFile: /etc/bcd/bmc-ca.pem}
    ipmi: {port: 623}
    credentialRef: rack4-admin
    proxy:
      allow:
        - {methods: [GET], path: /redfish/v1/**}
credentials:
  dir: /etc/bcd/bmc-credentials
`

func TestParseInventory(t *testing.T) {
	inv, err := site.ParseInventory([]byte(example))
	require.NoError(t, err)
	b, err := inv.Lookup("rack4-u12")
	require.NoError(t, err)
	require.Equal(t, []string{"redfish", "ipmi"}, b.Providers)
	require.Equal(t, 443, b.RedfishPort())
	require.Equal(t, 623, b.IPMIPort())
	_, err = inv.Lookup("nope")
	require.ErrorIs(t, err, site.ErrUnknownBMC)
	require.ErrorContains(t, err, "rack4-u12")
}

// "Bad input gets a clear error naming what was wrong."
func TestParseInventoryNamesEveryProblem(t *testing.T) {
	for in, want := range map[string]string{
		`bmcs: [{id: a, address: bmc1.example.com, providers: [redfish], credentialRef: c}]`:                                                       `bmcs[0].address: "bmc1.example.com" is not an IP address`,
		`bmcs: [{id: a, address: 10.0.0.1, providers: [], credentialRef: c}]`:                                                                      "bmcs[0].providers: name at least one",
		`bmcs: [{id: a, address: 10.0.0.1, providers: [snmp], credentialRef: c}]`:                                                                  `"snmp" is not redfish or ipmi`,
		`bmcs: [{id: a, address: 10.0.0.1, providers: [ipmi], credentialRef: ../x}]`:                                                               "bmcs[0].credentialRef",
		`bmcs: [{id: a, address: 10.0.0.1, providers: [ipmi], credentialRef: c}, {id: a, address: 10.0.0.2, providers: [ipmi], credentialRef: c}]`: `bmcs[1].id "a": listed twice`,
		`bmcs: [{id: a, adress: 10.0.0.1}]`:                                                                                                        "unknown field",
		`bmcs: [{id: a, address: 10.0.0.1, providers: [ipmi], credentialRef: c, proxy: {allow: [{methods: [CONNECT], path: /}]}}]`:                 `"CONNECT" is not one of`,
		`bmcs: [{id: a, address: 10.0.0.1, providers: [ipmi], credentialRef: c, proxy: {allow: [{methods: [GET], path: /a/../b}]}}]`:               "must be an absolute path without ..",
	} {
		_, err := site.ParseInventory([]byte(in))
		require.ErrorContains(t, err, want, in)
	}
}

func TestFileCredentials(t *testing.T) {
	dir := t.TempDir()
	src := site.FileCredentials{Dir: dir}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"username":"root","password":"pw-1"}`), 0o600))
	c, err := src.Credential(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, "root", c.Username)
	require.Equal(t, "pw-1", c.Password)
	for _, s := range []string{c.String(), c.GoString()} {
		require.NotContains(t, s, "pw-1")
	}
	b, err := c.MarshalJSON()
	require.NoError(t, err)
	require.NotContains(t, string(b), "pw-1")

	_, err = src.Credential(context.Background(), "missing")
	require.ErrorIs(t, err, site.ErrNoCredential)
	_, err = src.Credential(context.Background(), "../etc/shadow")
	require.ErrorContains(t, err, "must be letters")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "loose.json"), []byte(`{"username":"root","password":"pw-2"}`), 0o644))
	_, err = src.Credential(context.Background(), "loose")
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"username":"root","password":"pw-3",}`), 0o600))
	_, err = src.Credential(context.Background(), "bad")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "pw-3", "a parse error never quotes the password")
}

// FuzzParseInventory: any bytes give an inventory that validates, or an
// error; never a panic.
func FuzzParseInventory(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(`{"bmcs":[{"id":"a","address":"::1","providers":["ipmi"],"credentialRef":"c"}]}`))
	f.Add([]byte(`bmcs: [{id: a, address: 10.0.0.1, providers: [ipmi, ipmi], credentialRef: c}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		inv, err := site.ParseInventory(b)
		if err != nil {
			return
		}
		require.NoError(t, inv.Validate())
		for _, x := range inv.BMCs {
			_, err := x.IP()
			require.NoError(t, err)
			require.NotEmpty(t, x.Providers)
		}
	})
}

// FuzzParseCredential: an error never quotes the file, which holds the
// password.
func FuzzParseCredential(f *testing.F) {
	f.Add([]byte(`{"username":"root","password":"hunter2"}`))
	f.Add([]byte(`{"username":"root","password":"hunter2","x":1}`))
	f.Add([]byte(`not json hunter2`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := site.ParseCredential("ref", b)
		if err != nil {
			// The errors are fixed texts: none quotes the body.
			require.Contains(t, []string{
				`credential "ref": not a JSON object of username and password`,
				`credential "ref": needs a username and a password`,
			}, err.Error())
			return
		}
		require.NotEmpty(t, c.Username)
	})
}

func TestCommandSecretsBeforeTheFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"username":"file","password":"pw-f"}`), 0o600))
	src := site.CommandSecrets{Secrets: map[string][]byte{"a": []byte(`{"username":"secret","password":"pw-s"}`)}, Fallback: site.FileCredentials{Dir: dir}}
	c, err := src.Credential(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, "secret", c.Username, "the command's secretRef wins")
	src.Secrets = nil
	c, err = src.Credential(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, "file", c.Username)
	_, err = site.CommandSecrets{Fallback: site.FileCredentials{}}.Credential(context.Background(), "a")
	require.ErrorIs(t, err, site.ErrNoCredential)
	require.ErrorContains(t, err, `name it in the command's secretRefs`)
}
