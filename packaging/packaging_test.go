package packaging

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/better-compute/commands/bcd/config"
	"github.com/better-compute/commands/controlplane/server"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// recipe is the part of an nfpm.yaml the tests read.
type recipe struct {
	Name     string `yaml:"name"`
	Contents []struct {
		Src      string `yaml:"src"`
		Dst      string `yaml:"dst"`
		Type     string `yaml:"type"`
		Packager string `yaml:"packager"`
		FileInfo struct {
			Mode int `yaml:"mode"`
		} `yaml:"file_info"`
	} `yaml:"contents"`
	Overrides map[string]struct {
		Scripts map[string]string `yaml:"scripts"`
	} `yaml:"overrides"`
}

func readRecipe(t *testing.T, pkg string) recipe {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pkg, "nfpm.yaml"))
	require.NoError(t, err)
	var r recipe
	require.NoError(t, yaml.Unmarshal(b, &r))
	require.Equal(t, pkg, r.Name)
	return r
}

// dst returns the content entry installed at path.
func dst(t *testing.T, r recipe, path string) (src, typ string, mode int) {
	t.Helper()
	for _, c := range r.Contents {
		if c.Dst == path {
			return c.Src, c.Type, c.FileInfo.Mode
		}
	}
	t.Fatalf("%s: nothing installed at %s", r.Name, path)
	return "", "", 0
}

// service reads a unit's [Service] options, last value wins (systemd's
// rule for single-valued settings).
func service(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	require.NoError(t, err)
	m := map[string]string{}
	for _, o := range opts {
		if o.Section == "Service" {
			m[o.Name] = o.Value
		}
	}
	return m
}

// "/etc/bcd/... as config|noreplace (the file must be valid for bcd's config
// loader)": the shipped file loads with bcd/config, strict about keys, and
// is complete but for the node's own id.
func TestBcdConfig_LoadsWithBcdConfig(t *testing.T) {
	c, err := config.Load("bcd/bcd.yaml", false)
	require.NoError(t, err)
	def := config.Default()
	require.Equal(t, def.StateDir, c.StateDir)
	require.Equal(t, "/usr/lib/bcd/plugins", c.PluginDir)
	require.Equal(t, "node", c.Role)
	require.Empty(t, c.NodeID, "a packaged config cannot know the node's id")

	err = c.Validate()
	require.Error(t, err)
	require.Contains(t, err.Error(), "nodeId")
	c.NodeID = "node_0412"
	require.NoError(t, c.Validate(), "with its id set, the shipped config is valid")
}

// The package installs bcd's config where bcd looks by default, so that
// `bcd kinds`, `bcd exec` and `bcd journal` read what the service reads.
func TestBcdConfig_InstalledWhereBcdLooks(t *testing.T) {
	r := readRecipe(t, "bcd")
	src, typ, _ := dst(t, r, config.DefaultPath)
	require.Equal(t, "packaging/bcd/bcd.yaml", src)
	require.Equal(t, "config|noreplace", typ)
	require.Contains(t, service(t, "bcd/bcd.service")["ExecStart"], "--config "+config.DefaultPath)
}

// "/var/lib/bcd for state (0750)", "a seed trust bundle under
// /usr/share/bcd", "/usr/bin/bcd", "the first-party plugins under
// /usr/lib/bcd/plugins".
func TestBcdRecipe_Layout(t *testing.T) {
	r := readRecipe(t, "bcd")
	_, typ, mode := dst(t, r, "/var/lib/bcd")
	require.Equal(t, "dir", typ)
	require.Equal(t, 0o750, mode)
	src, _, _ := dst(t, r, "/usr/share/bcd/trust-bundle.seed.json")
	require.Equal(t, "packaging/bcd/trust-bundle.seed.json", src)
	_, _, mode = dst(t, r, "/usr/bin/bcd")
	require.Equal(t, 0o755, mode)
	src, _, _ = dst(t, r, "/usr/lib/bcd/plugins/")
	require.Equal(t, "dist/stage/plugins/*", src)
	require.Equal(t, config.Default().PluginDir+"/", "/usr/lib/bcd/plugins/")
}

// scripts/check-packages names every first-party plugin the rpm must hold:
// a new plugins/*/cmd/* must be added there, or the check would pass a
// package without it.
func TestCheckPackages_ListsEveryFirstPartyPlugin(t *testing.T) {
	b, err := os.ReadFile("../scripts/check-packages")
	require.NoError(t, err)
	cmds, err := filepath.Glob("../plugins/*/cmd/*")
	require.NoError(t, err)
	require.NotEmpty(t, cmds)
	for _, c := range cmds {
		require.Contains(t, string(b), "/usr/lib/bcd/plugins/"+filepath.Base(c)+" ")
	}
}

// "/usr/lib/systemd/system/bcd.service as a plain file (never a conffile)",
// and every file under /etc is config|noreplace, in both packages.
func TestRecipes_UnitsPlainConfigsNoReplace(t *testing.T) {
	for _, pkg := range []string{"bcd", "bc-server"} {
		r := readRecipe(t, pkg)
		units := 0
		for _, c := range r.Contents {
			switch {
			case strings.HasPrefix(c.Dst, "/usr/lib/systemd/"):
				units++
				require.Empty(t, c.Type, "%s: %s must be a plain file", pkg, c.Dst)
			case strings.HasPrefix(c.Dst, "/etc/") && c.Type != "dir":
				require.Equal(t, "config|noreplace", c.Type, "%s: %s", pkg, c.Dst)
			}
			if c.Src != "" && !strings.HasPrefix(c.Src, "dist/") {
				_, err := os.Stat(filepath.Join("..", c.Src))
				require.NoError(t, err, "%s: source of %s", pkg, c.Dst)
			}
		}
		require.Equal(t, 1, units, pkg)
	}
}

// "The unit: Type=notify with WatchdogSec, ... Restart=on-failure; ...
// KillMode=control-group so plugin children die", and the hardening keeps
// what GPU reset and the XID reader need.
func TestBcdUnit(t *testing.T) {
	s := service(t, "bcd/bcd.service")
	require.Equal(t, "notify", s["Type"])
	require.Equal(t, "main", s["NotifyAccess"])
	wd, err := time.ParseDuration(s["WatchdogSec"])
	require.NoError(t, err)
	require.Greater(t, wd, time.Duration(0))
	require.Equal(t, "on-failure", s["Restart"])
	require.Equal(t, "control-group", s["KillMode"])
	require.Equal(t, "/usr/bin/bcd run --config "+config.DefaultPath, s["ExecStart"])
	// GPU reset opens /dev/nvidia*; the XID reader and logs.collect read
	// /dev/kmsg; gpu.reset scans every process's fds; reboot is D-Bus.
	require.Equal(t, "no", s["PrivateDevices"])
	for _, forbidden := range []string{"ProtectKernelLogs", "ProtectKernelTunables", "ProtectKernelModules", "ProtectProc", "DevicePolicy", "DeviceAllow",
		// ProtectClock implies DeviceAllow=char-rtc, which makes the device
		// policy an allow-list without /dev/nvidia*.
		"ProtectClock", "User", "DynamicUser", "SystemCallFilter", "MemoryDenyWriteExecute"} {
		require.NotContains(t, s, forbidden)
	}
	require.Contains(t, strings.Fields(s["RestrictAddressFamilies"]), "AF_UNIX", "D-Bus to logind")
	require.Equal(t, "2", s["RestartPreventExitStatus"], "bcd exits 2 on a config error")
}

// "hardening ..., each choice explained in a comment": in the hardening
// section every run of settings is introduced by a comment.
func TestBcdUnit_HardeningIsExplained(t *testing.T) {
	b, err := os.ReadFile("bcd/bcd.service")
	require.NoError(t, err)
	text := string(b)
	i := strings.Index(text, "# --- Hardening")
	require.GreaterOrEqual(t, i, 0)
	lines := strings.Split(text[i:strings.Index(text, "[Install]")], "\n")
	settings := 0
	for n := 1; n < len(lines); n++ {
		l := strings.TrimSpace(lines[n])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		settings++
		prev := strings.TrimSpace(lines[n-1])
		require.True(t, prev != "", "%q follows a blank line, not a comment", l)
	}
	require.Greater(t, settings, 10)
}

func TestServerConfig_LoadsWithServer(t *testing.T) {
	c, err := server.LoadConfig("bc-server/server.yaml")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(c.GRPCListen, "127.0.0.1:"), "plaintext API stays on loopback until TLS is set")
	require.Empty(t, c.TLS.Cert)

	r := readRecipe(t, "bc-server")
	src, typ, mode := dst(t, r, "/etc/bc-server/server.yaml")
	require.Equal(t, "packaging/bc-server/server.yaml", src)
	require.Equal(t, "config|noreplace", typ)
	require.Equal(t, 0o640, mode)
	_, typ, _ = dst(t, r, c.KindsDir)
	require.Equal(t, "dir", typ, "the configured kindsDir is shipped")

	s := service(t, "bc-server/bc-server.service")
	require.Equal(t, "/usr/bin/bc-server --config /etc/bc-server/server.yaml", s["ExecStart"])
	require.Equal(t, "bc-server", s["User"])
	require.Equal(t, "on-failure", s["Restart"])
	// The server has no hardware to reach: fully locked down.
	require.Equal(t, "yes", s["PrivateDevices"])
	require.Equal(t, "strict", s["ProtectSystem"])
	require.Empty(t, s["CapabilityBoundingSet"])

	// Issue 31: "The bc-server package ... create[s] the signing authority
	// at install (or first start)". The packaged config signs, and its
	// first start makes the root in the unit's StateDirectory: the one
	// place ProtectSystem=strict lets bc-server write, owned by its user.
	require.True(t, c.PKI.CreateCommandSigning, "the first start creates the root")
	require.Equal(t, "/var/lib/"+s["StateDirectory"]+"/pki/command-root.pem", c.PKI.CommandSigning)
	require.Equal(t, "0027", s["UMask"])
	_, typ, mode = dst(t, r, "/var/lib/bc-server")
	require.Equal(t, "dir", typ)
	require.Equal(t, 0o750, mode)
	for _, script := range []string{"bc-server/deb/postinst", "bc-server/rpm/post"} {
		b, err := os.ReadFile(script)
		require.NoError(t, err)
		require.Contains(t, string(b), "its first start creates the command-signing root "+c.PKI.CommandSigning, script)
		require.Contains(t, string(b), "to offline storage", script)
	}
}

// The seed bundle is a TrustBundle without roots: commands go unsigned until
// the control plane delivers a bundle (spec: "Once the daemon's trust bundle
// holds command-signing roots, it rejects every command without a valid
// signature").
func TestTrustSeed(t *testing.T) {
	b, err := os.ReadFile("bcd/trust-bundle.seed.json")
	require.NoError(t, err)
	var tb agentv1.TrustBundle
	require.NoError(t, protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(b, &tb))
	require.Zero(t, tb.GetVersion())
	require.Empty(t, tb.GetSigned(), "the seed holds no roots: the first bundle comes at join or from trustAnchors")
}

// "Separate deb and rpm maintainer scripts (their arguments differ)", each
// valid sh, and "daemon-reload only when systemd runs".
func TestMaintainerScripts(t *testing.T) {
	for _, pkg := range []string{"bcd", "bc-server"} {
		r := readRecipe(t, pkg)
		deb, rpm := r.Overrides["deb"].Scripts, r.Overrides["rpm"].Scripts
		require.NotEmpty(t, deb["postinstall"], pkg)
		require.NotEmpty(t, rpm["postinstall"], pkg)
		for _, scripts := range []map[string]string{deb, rpm} {
			for _, path := range scripts {
				full := filepath.Join("..", path)
				out, err := exec.Command("sh", "-n", full).CombinedOutput()
				require.NoError(t, err, "%s: %s", path, out)
				b, err := os.ReadFile(full)
				require.NoError(t, err)
				text := string(b)
				if strings.Contains(text, "daemon-reload") || strings.Contains(text, "try-restart") {
					require.Contains(t, text, "[ -d /run/systemd/system ]", path)
				}
				fi, err := os.Stat(full)
				require.NoError(t, err)
				require.NotZero(t, fi.Mode()&0o100, "%s is executable", path)
			}
		}
		// dpkg's postinst dispatches on configure/abort-*, rpm's on a count.
		deb1, err := os.ReadFile(filepath.Join("..", deb["postinstall"]))
		require.NoError(t, err)
		require.Contains(t, string(deb1), "configure)")
		require.Contains(t, string(deb1), "abort-upgrade")
		rpm1, err := os.ReadFile(filepath.Join("..", rpm["postinstall"]))
		require.NoError(t, err)
		require.Contains(t, string(rpm1), `"$1" -eq 1`)
		require.NotEqual(t, deb["postinstall"], rpm["postinstall"])
	}
}

// The alert rules the packages install pass `promtool check rules`, and
// their unit tests (`promtool test rules`) pass; skipped where promtool is
// not installed (scripts/check-rules, which CI runs, installs it).
func TestAlertRules_Promtool(t *testing.T) {
	for _, pkg := range []string{"bcd", "bc-server"} {
		r := readRecipe(t, pkg)
		src, _, mode := dst(t, r, "/usr/share/"+pkg+"/prometheus/"+pkg+".rules.yaml")
		require.Equal(t, "packaging/"+pkg+"/prometheus/"+pkg+".rules.yaml", src)
		require.Equal(t, 0o644, mode)
		src, _, _ = dst(t, r, "/usr/share/"+pkg+"/grafana/"+pkg+".json")
		require.Equal(t, "packaging/"+pkg+"/grafana/"+pkg+".json", src)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus; scripts/check-rules does it as root)")
	}
	out, err := exec.Command(promtool, "check", "rules", "bc-server/prometheus/bc-server.rules.yaml", "bcd/prometheus/bcd.rules.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(promtool, "test", "rules", "bc-server/prometheus/rules_test.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// Every series the rules and dashboards query is one the code serves: a
// renamed metric must take its alerts and panels with it.
func TestAlertsAndDashboards_NameServedSeries(t *testing.T) {
	served := map[string]bool{}
	for _, dir := range []string{"../bcd", "../controlplane"} {
		require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range seriesName.FindAllString(string(b), -1) {
				served[m] = true
			}
			return nil
		}))
	}
	files := []string{"bc-server/prometheus/bc-server.rules.yaml", "bcd/prometheus/bcd.rules.yaml",
		"bc-server/grafana/bc-server.json", "bcd/grafana/bcd.json"}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if strings.HasSuffix(f, ".json") {
			var d map[string]any
			require.NoError(t, json.Unmarshal(b, &d), "%s is JSON", f)
			require.NotEmpty(t, d["uid"], f)
			require.NotEmpty(t, d["panels"], f)
		}
		names := seriesName.FindAllString(string(b), -1)
		require.NotEmpty(t, names, f)
		for _, n := range names {
			base := n
			for _, suf := range []string{"_bucket", "_count", "_sum"} {
				if s, ok := strings.CutSuffix(n, suf); ok && served[s] {
					base = s
				}
			}
			require.True(t, served[base], "%s queries %s, which no bcd or controlplane code serves", f, n)
		}
	}
}

// seriesName matches a bc_ or bcd_ series name in a query or in Go source.
var seriesName = regexp.MustCompile(`\bbcd?_[a-z][a-z0-9_]*[a-z0-9]\b`)

// "the unit's settings (KillMode, StartLimitBurst) let the helper work":
// the start limit allows the helper's two restarts of a rollback plus
// Restart=on-failure's within one interval, KillMode stays control-group
// (the helper is a transient unit outside bcd's cgroup), and the package
// ships the helper beside, never inside, the plugin directory.
func TestBcdUnit_LetsTheUpgradeHelperWork(t *testing.T) {
	f, err := os.Open("bcd/bcd.service")
	require.NoError(t, err)
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	require.NoError(t, err)
	u := map[string]string{}
	for _, o := range opts {
		if o.Section == "Unit" {
			u[o.Name] = o.Value
		}
	}
	burst, err := strconv.Atoi(u["StartLimitBurst"])
	require.NoError(t, err)
	require.GreaterOrEqual(t, burst, 5, "two helper restarts and Restart=on-failure's within the interval")
	require.NotEmpty(t, u["StartLimitIntervalSec"])
	require.Equal(t, "control-group", service(t, "bcd/bcd.service")["KillMode"])
	r := readRecipe(t, "bcd")
	src, _, _ := dst(t, r, "/usr/lib/bcd/bcd-upgrader")
	require.Equal(t, "dist/stage/bcd-upgrader", src)
}
