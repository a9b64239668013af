package depcheck

import (
	"fmt"
	"slices"
	"strings"
)

// Rule is one wall: no package that From selects may link a package that
// Forbid accepts (Forbid sees the package the chain starts from, so "another
// plugin" can be said).
type Rule struct {
	// Name says the wall in words, as a report shows it.
	Name string
	// From selects the repository packages the rule holds for.
	From func(path string) bool
	// Forbid reports whether from may not link p.
	Forbid func(from string, p *Package) bool
	// Tests holds the rule for the packages' tests as well.
	Tests bool
	// Direct judges only the packages' own imports (and their tests',
	// with Tests), not what those link in turn: a wall that says "only
	// through X" forbids the direct import and lets X link it.
	Direct bool
}

// Violation is a broken wall and the import chain that breaks it.
type Violation struct {
	Rule  string
	Chain []string
}

// String reads "rule: a -> b -> c".
func (v Violation) String() string {
	return fmt.Sprintf("%s: %s", v.Rule, strings.Join(v.Chain, " -> "))
}

// Check returns every package that breaks a rule, with one chain each.
func Check(g *Graph, rules []Rule) []Violation {
	var out []Violation
	for _, r := range rules {
		for _, root := range g.roots() {
			if !r.From(root) {
				continue
			}
			bad := func(p *Package) bool { return r.Forbid(root, p) }
			find := g.chain
			if r.Direct {
				find = g.direct
			}
			if c := find(root, r.Tests, bad); c != nil {
				out = append(out, Violation{Rule: r.Name, Chain: c})
			}
		}
	}
	return out
}

func under(path, dir string) bool {
	full := Module + "/" + dir
	return path == full || strings.HasPrefix(path, full+"/")
}

func inModule(p *Package, mods ...string) bool {
	return slices.Contains(mods, p.ModulePath())
}

// pluginOf names the first-party plugin a package belongs to ("nvml" for
// plugins/nvml/...), or "" for plugins/internal and packages outside
// plugins/.
func pluginOf(path string) string {
	rest, ok := strings.CutPrefix(path, Module+"/plugins/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	if name == "internal" {
		return ""
	}
	return name
}

// Modules the walls name.
const (
	modPGX     = "github.com/jackc/pgx/v5"
	modGodbus  = "github.com/godbus/dbus/v5"
	modSystemd = "github.com/coreos/go-systemd/v22"
	modNVML    = "github.com/NVIDIA/go-nvml"
	modGofish  = "github.com/stmcginnis/gofish"
	modIPMI    = "github.com/bougou/go-ipmi"
)

// SDKModules is the SDK's declared dependency set: what a vendor's `go get`
// of the SDK brings, beside the standard library. go-plugin and its
// transitive set, gRPC and protobuf, hclog, the JSON Schema validator and
// Masterminds/semver (a manifest's compatibleVersions).
var SDKModules = []string{
	"github.com/Masterminds/semver/v3",
	"github.com/hashicorp/go-plugin",
	"github.com/hashicorp/go-hclog",
	"github.com/hashicorp/yamux",
	"github.com/oklog/run",
	"github.com/fatih/color",
	"github.com/mattn/go-colorable",
	"github.com/mattn/go-isatty",
	"github.com/golang/protobuf",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"google.golang.org/genproto/googleapis/rpc",
	"github.com/santhosh-tekuri/jsonschema/v6",
	"golang.org/x/net",
	"golang.org/x/sys",
	"golang.org/x/text",
}

// Rules are the repository's walls.
var Rules = []Rule{
	{
		Name:   "bcd and the plugins never import the control plane",
		From:   func(p string) bool { return under(p, "bcd") || under(p, "plugins") },
		Forbid: func(_ string, p *Package) bool { return under(p.ImportPath, "controlplane") },
	},
	{
		Name: "no plugin imports another plugin, nor do its tests",
		From: func(p string) bool { return pluginOf(p) != "" || under(p, "plugins/internal") },
		Forbid: func(from string, p *Package) bool {
			other := pluginOf(p.ImportPath)
			return other != "" && other != pluginOf(from)
		},
		Tests: true,
	},
	{
		Name: "a first-party manifest package imports only sdk/kind",
		From: func(p string) bool { return pluginOf(p) != "" && strings.HasSuffix(p, "/manifest") },
		Forbid: func(_ string, p *Package) bool {
			return p.ModulePath() == Module && !under(p.ImportPath, "sdk")
		},
	},
	{
		Name: "bc-server's kind registry links only the plugins' manifest packages",
		From: func(p string) bool { return p == Module+"/controlplane/commands/kinds" },
		Forbid: func(_ string, p *Package) bool {
			return under(p.ImportPath, "plugins") && !strings.HasSuffix(p.ImportPath, "/manifest")
		},
	},
	{
		Name: "better-compute links neither pgx, godbus nor a plugin package",
		From: func(p string) bool { return p == Module+"/controlplane/cmd/better-compute" },
		Forbid: func(_ string, p *Package) bool {
			return inModule(p, modPGX, modGodbus) || under(p.ImportPath, "plugins")
		},
	},
	{
		Name: "bc-mcp links neither pgx, godbus nor a plugin package",
		From: func(p string) bool { return p == Module+"/controlplane/cmd/bc-mcp" },
		Forbid: func(_ string, p *Package) bool {
			return inModule(p, modPGX, modGodbus) || under(p.ImportPath, "plugins")
		},
	},
	{
		Name: "bc-server links neither godbus, go-systemd, go-nvml, gofish nor go-ipmi",
		From: func(p string) bool { return p == Module+"/controlplane/cmd/bc-server" },
		Forbid: func(_ string, p *Package) bool {
			return inModule(p, modGodbus, modSystemd, modNVML, modGofish, modIPMI)
		},
	},
	{
		Name: "the SDK links only sdk/, the standard library and its declared modules",
		From: func(p string) bool { return under(p, "sdk") },
		Forbid: func(_ string, p *Package) bool {
			switch {
			case p.Standard, under(p.ImportPath, "sdk"):
				return false
			case p.ModulePath() == Module:
				return true
			}
			return !slices.Contains(SDKModules, p.ModulePath())
		},
	},
	{
		// internal/tools/ is the written exception: the repository's own
		// development binaries (kinddoc renders the control plane's kinds,
		// mocknvidiasmi answers as the nvml plugin's mock does, the fakes
		// serve what bcd talks to), each linking what it drives. The SDK
		// guide runs kinddoc by that path, so it stays.
		Name: "internal/ (the neutral packages) imports nothing of the control plane, bcd or the plugins, nor do its tests",
		From: func(p string) bool { return under(p, "internal") && !under(p, "internal/tools") },
		Forbid: func(_ string, p *Package) bool {
			return under(p.ImportPath, "controlplane") || under(p.ImportPath, "bcd") || under(p.ImportPath, "plugins")
		},
		Tests: true,
	},
	{
		Name: "the control plane's PostgreSQL plumbing (controlplane/internal) links no other room of the control plane",
		From: func(p string) bool {
			return under(p, "controlplane/internal") && !under(p, "controlplane/internal/storetest")
		},
		Forbid: func(_ string, p *Package) bool {
			return under(p.ImportPath, "controlplane") && !under(p.ImportPath, "controlplane/internal")
		},
	},
	{
		// bc-sim is the exception: the simulator is its binary.
		Name: "production code never links the test doubles (controlplane/testing) but bc-sim",
		From: func(p string) bool {
			return !under(p, "controlplane/testing") && p != Module+"/controlplane/cmd/bc-sim"
		},
		Forbid: func(_ string, p *Package) bool { return under(p.ImportPath, "controlplane/testing") },
	},
	{
		Name: "the core rooms (commands, fleet, controlplane/internal) link no front door, module, server or console",
		From: func(p string) bool {
			return under(p, "controlplane/commands") || under(p, "controlplane/fleet") || under(p, "controlplane/internal")
		},
		Forbid: func(_ string, p *Package) bool {
			for _, r := range []string{"controlplane/front", "controlplane/modules", "controlplane/server", "controlplane/console", "controlplane/cmd"} {
				if under(p.ImportPath, r) {
					return true
				}
			}
			return false
		},
	},
	{
		// The trust bundle is built from trustbundle.Settings, trust's own
		// type, which the server fills from its pki section: trust links
		// no configuration of the server's.
		Name: "trust links no front door, module, server or console",
		From: func(p string) bool { return under(p, "controlplane/trust") },
		Forbid: func(_ string, p *Package) bool {
			return under(p.ImportPath, "controlplane/front") || under(p.ImportPath, "controlplane/modules") ||
				under(p.ImportPath, "controlplane/server") || under(p.ImportPath, "controlplane/console")
		},
	},
	{
		Name: "a module links no front door, the server or the console",
		From: func(p string) bool { return under(p, "controlplane/modules") },
		Forbid: func(_ string, p *Package) bool {
			return under(p.ImportPath, "controlplane/front") || under(p.ImportPath, "controlplane/server") ||
				under(p.ImportPath, "controlplane/console")
		},
	},
	{
		// The module API (controlplane/modules) is the way: its Commands
		// queue with the module's key rules and name the module as who
		// asked. controlplane/modules/modulestest is the one written
		// exception: a module's test bench builds the queue the host hands
		// the modules and plays what no module does (the API's tenants and
		// nodes, a node's reports of its commands), so that the modules'
		// tests need not import the queue either.
		Name: "a module reaches the command queue only through the module API, nor do its tests",
		From: func(p string) bool {
			return under(p, "controlplane/modules") && p != Module+"/controlplane/modules" &&
				p != Module+"/controlplane/modules/modulestest"
		},
		Forbid: func(_ string, p *Package) bool { return p.ImportPath == Module+"/controlplane/commands/queue" },
		Tests:  true,
		Direct: true,
	},
}
