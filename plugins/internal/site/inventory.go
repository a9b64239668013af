// Package site is what the site agent's kinds share: the site inventory (the
// BMCs a site agent may reach, each at a pinned address) and the credential
// source that turns an inventory entry's credential reference into a
// username and password. The bmc and siteproxy plugins import it; it
// imports no plugin.
package site

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvInventory names the site inventory file for the site kinds (bcd's
// pluginEnv sets it on a site agent).
const EnvInventory = "BCD_SITE_INVENTORY"

// MaxInventoryBytes bounds the inventory file.
const MaxInventoryBytes = 4 << 20

// Providers the inventory may name, in the order a BMC entry lists them.
const (
	ProviderRedfish = "redfish"
	ProviderIPMI    = "ipmi"
)

// Inventory is the site inventory file: the BMCs this site agent manages.
type Inventory struct {
	// BMCs are the managed BMCs, each named by an id that commands use.
	BMCs []BMC `json:"bmcs"`
	// Credentials configures the file-backed credential source.
	Credentials CredentialsConfig `json:"credentials,omitempty"`
}

// CredentialsConfig configures FileCredentials.
type CredentialsConfig struct {
	// Dir holds one file per credential reference, <dir>/<ref>.json, mode
	// 0600 or stricter: {"username": "...", "password": "..."}.
	Dir string `json:"dir,omitempty"`
}

// BMC is one inventory entry.
type BMC struct {
	// ID names the BMC in commands ("rack4-u12").
	ID string `json:"id"`
	// Machine is the machine the BMC manages (a node id or asset tag), for
	// people and reports; commands name the BMC by ID.
	Machine string `json:"machine,omitempty"`
	// Address is the BMC's pinned IP address: the agent never resolves a
	// name, so DNS cannot move a command to another BMC.
	Address string `json:"address"`
	// Providers lists the protocols to try, in order (redfish, ipmi).
	Providers []string `json:"providers"`
	// Redfish configures the Redfish provider.
	Redfish RedfishConfig `json:"redfish,omitempty"`
	// IPMI configures the IPMI provider.
	IPMI IPMIConfig `json:"ipmi,omitempty"`
	// CredentialRef names the BMC's credential in the credential source.
	CredentialRef string `json:"credentialRef"`
	// Proxy allows site.httpProxy requests to this BMC; none when empty.
	Proxy ProxyConfig `json:"proxy,omitempty"`
}

// RedfishConfig configures Redfish access to one BMC.
type RedfishConfig struct {
	// Port is the HTTPS port (443 when zero).
	Port int `json:"port,omitempty"`
	// System is the ComputerSystem id; empty picks the only one.
	System string `json:"system,omitempty"`
	// CAFile is a PEM bundle that verifies the BMC's certificate. Without
	// it the system roots do.
	CAFile string `json:"caFile,omitempty"`
	// ServerName overrides the name checked in the BMC's certificate.
	ServerName string `json:"serverName,omitempty"`
}

// IPMIConfig configures IPMI over LAN access to one BMC.
type IPMIConfig struct {
	// Port is the RMCP port (623 when zero).
	Port int `json:"port,omitempty"`
	// Interface is lanplus (IPMI 2.0, the default) or lan (1.5).
	Interface string `json:"interface,omitempty"`
}

// ProxyConfig is what site.httpProxy may send to one BMC.
type ProxyConfig struct {
	// Allow lists the allowed requests; nothing is allowed without one.
	Allow []ProxyRule `json:"allow,omitempty"`
}

// ProxyRule allows methods on a path pattern: a path that ends in "/**"
// allows everything below it, any other pattern matches exactly.
type ProxyRule struct {
	Methods []string `json:"methods"`
	Path    string   `json:"path"`
}

var (
	idPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	refPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	// ErrUnknownBMC is returned for a BMC id the inventory does not hold.
	ErrUnknownBMC = errors.New("BMC not in the site inventory")
)

// proxyMethods are the methods a proxy rule may allow: never CONNECT,
// TRACE or OPTIONS.
var proxyMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PATCH": true, "PUT": true, "DELETE": true}

// LoadInventory reads and validates the inventory file at path.
func LoadInventory(path string) (*Inventory, error) {
	if path == "" {
		return nil, fmt.Errorf("no site inventory: set %s (pluginEnv in bcd.yaml) to the inventory file", EnvInventory)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("site inventory: %w", err)
	}
	if st.Size() > MaxInventoryBytes {
		return nil, fmt.Errorf("site inventory %s: %d bytes, more than the %d allowed", path, st.Size(), MaxInventoryBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("site inventory: %w", err)
	}
	inv, err := ParseInventory(b)
	if err != nil {
		return nil, fmt.Errorf("site inventory %s: %w", path, err)
	}
	return inv, nil
}

// ParseInventory parses an inventory (YAML or JSON) and reports every
// problem, each naming its entry and field. Unknown fields are refused, so
// a misspelt key is an error rather than a silent default.
// sigs.k8s.io/yaml reads it, as bcd's own config: JSON-shaped types, and
// the YAML 1.1 scalars inventories have always been read with.
func ParseInventory(b []byte) (*Inventory, error) {
	if len(b) > MaxInventoryBytes {
		return nil, fmt.Errorf("%d bytes, more than the %d allowed", len(b), MaxInventoryBytes)
	}
	var inv Inventory
	if err := yaml.UnmarshalStrict(b, &inv); err != nil {
		return nil, fmt.Errorf("not a site inventory: %w", err)
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// Validate reports every problem with the inventory.
func (inv *Inventory) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	seen := map[string]bool{}
	for i := range inv.BMCs {
		b := &inv.BMCs[i]
		at := fmt.Sprintf("bmcs[%d]", i)
		if !idPattern.MatchString(b.ID) {
			bad("%s.id %q: must be 1 to 63 letters, digits, dots, dashes or underscores", at, b.ID)
		} else if seen[b.ID] {
			bad("%s.id %q: listed twice", at, b.ID)
		}
		seen[b.ID] = true
		if _, err := b.IP(); err != nil {
			bad("%s.address: %v", at, err)
		}
		if len(b.Providers) == 0 {
			bad("%s.providers: name at least one of redfish, ipmi (tried in order)", at)
		}
		dup := map[string]bool{}
		for _, p := range b.Providers {
			if p != ProviderRedfish && p != ProviderIPMI {
				bad("%s.providers: %q is not redfish or ipmi", at, p)
			}
			if dup[p] {
				bad("%s.providers: %q listed twice", at, p)
			}
			dup[p] = true
		}
		for _, port := range []int{b.Redfish.Port, b.IPMI.Port} {
			if port < 0 || port > 65535 {
				bad("%s: port %d is outside 1..65535", at, port)
			}
		}
		if b.IPMI.Interface != "" && b.IPMI.Interface != "lanplus" && b.IPMI.Interface != "lan" {
			bad("%s.ipmi.interface %q: must be lanplus or lan", at, b.IPMI.Interface)
		}
		if !refPattern.MatchString(b.CredentialRef) {
			bad("%s.credentialRef %q: must be 1 to 128 letters, digits, dots, dashes or underscores", at, b.CredentialRef)
		}
		for j, r := range b.Proxy.Allow {
			if !strings.HasPrefix(r.Path, "/") || strings.Contains(r.Path, "..") || strings.ContainsAny(r.Path, "?#") {
				bad("%s.proxy.allow[%d].path %q: must be an absolute path without .., ? or #", at, j, r.Path)
			}
			if len(r.Methods) == 0 {
				bad("%s.proxy.allow[%d].methods: name at least one method", at, j)
			}
			for _, m := range r.Methods {
				if !proxyMethods[m] {
					bad("%s.proxy.allow[%d].methods: %q is not one of GET, HEAD, POST, PATCH, PUT, DELETE", at, j, m)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// IP returns the BMC's pinned address, which must be an IP literal: a
// name would be resolved at run time, and DNS could then point the command
// at another machine.
func (b BMC) IP() (netip.Addr, error) {
	a, err := netip.ParseAddr(b.Address)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address (the inventory pins each BMC's IP; names are not resolved)", b.Address)
	}
	if a.IsUnspecified() || a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("%q cannot be a BMC's address", b.Address)
	}
	return a.Unmap(), nil
}

// RedfishPort is the Redfish port, 443 by default.
func (b BMC) RedfishPort() int {
	if b.Redfish.Port == 0 {
		return 443
	}
	return b.Redfish.Port
}

// IPMIPort is the RMCP port, 623 by default.
func (b BMC) IPMIPort() int {
	if b.IPMI.Port == 0 {
		return 623
	}
	return b.IPMI.Port
}

// Lookup returns the BMC named id.
func (inv *Inventory) Lookup(id string) (BMC, error) {
	for _, b := range inv.BMCs {
		if b.ID == id {
			return b, nil
		}
	}
	return BMC{}, fmt.Errorf("%w: %q (the inventory lists %s)", ErrUnknownBMC, id, strings.Join(inv.ids(), ", "))
}

func (inv *Inventory) ids() []string {
	out := make([]string, 0, len(inv.BMCs))
	for _, b := range inv.BMCs {
		out = append(out, b.ID)
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}
