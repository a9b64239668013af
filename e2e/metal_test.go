package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/better-compute/commands/controlplane/modules/metal"
	"github.com/better-compute/commands/controlplane/server"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	"github.com/better-compute/commands/controlplane/server/servertest"
	"github.com/better-compute/commands/internal/bmctest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/internal/trust"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

const (
	siteNode    = "node_site1"
	bmcUser     = "admin"
	bmcPassword = "e2e-bmc-password"
)

// metalKinds writes the metal module's manifests into a kinds directory
// beside the harness's e2e kinds: servertest registers its own test kinds,
// and a kindsDir is how bc-server learns more (the same Go values the
// plugins serve, so the digests match).
func metalKinds(t *testing.T, cfg *server.Config) {
	dir := t.TempDir()
	ents, err := os.ReadDir(cfg.KindsDir)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(cfg.KindsDir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600))
	}
	b, err := json.Marshal(metal.Manifests())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "metal.json"), b, 0o600))
	cfg.KindsDir = dir
	cfg.Allowlist = append(cfg.Allowlist, "bmc.sensors")
}

// joinSite sets up a site agent as docs/metal.md says: nodes.create and
// nodes.createJoinToken with role site through the CLI, the bcd.yaml the
// page shows (its inventory path and poll interval replaced), bc-kind-bmc
// in the plugins directory, and bcd join.
func (c *cluster) joinSite(inventory string) *node {
	c.t.Helper()
	_, stderr, code := c.cliAs(servertest.TokAdmin, "api", "nodes.create", "tenantId="+servertest.TenantA, "nodeId="+siteNode, "role=site")
	require.Equal(c.t, 0, code, stderr)
	out, stderr, code := c.cliAs(servertest.TokAdmin, "api", "nodes.createJoinToken", "tenantId="+servertest.TenantA, "nodeId="+siteNode, "role=site")
	require.Equal(c.t, 0, code, stderr)
	var tok struct{ Token string }
	require.NoError(c.t, json.Unmarshal([]byte(out), &tok))
	require.True(c.t, strings.HasPrefix(tok.Token, "bcjoin_"), out)

	bin := testutil.BuildBinary(c.t, "./plugins/bmc/cmd/bc-kind-bmc")
	b, err := os.ReadFile(bin)
	require.NoError(c.t, err)
	require.NoError(c.t, os.WriteFile(filepath.Join(c.plugins, "bc-kind-bmc"), b, 0o755))

	n := &node{c: c, state: c.t.TempDir(), boot: filepath.Join(c.t.TempDir(), "boot_id"), config: filepath.Join(c.t.TempDir(), "bcd.yaml"), logs: &lockedBuffer{}}
	require.NoError(c.t, os.WriteFile(n.boot, []byte("boot-1\n"), 0o600))
	conf := docBlock(c.t, "site-bcd.yaml")
	require.Contains(c.t, conf, "/etc/bcd/site-inventory.yaml")
	require.Contains(c.t, conf, "BCD_BMC_POLL_INTERVAL: 3s")
	conf = strings.Replace(conf, "/etc/bcd/site-inventory.yaml", inventory, 1)
	conf = strings.Replace(conf, "BCD_BMC_POLL_INTERVAL: 3s", "BCD_BMC_POLL_INTERVAL: 100ms", 1)
	require.NoError(c.t, os.WriteFile(n.config, []byte(conf+"logLevel: debug\n"), 0o600))
	out, errs, code := n.bcd("join", "--token", tok.Token, "--server", c.srv.Gateway, "--ca-file", filepath.Join(c.srv.CADir, "ca.pem"))
	require.Equal(c.t, 0, code, "bcd join: %s", errs)
	require.Contains(c.t, out, "joined as "+siteNode+" (role site)")
	c.t.Cleanup(func() {
		n.kill()
		if c.t.Failed() {
			c.t.Logf("site bcd logs:\n%s", n.logs.String())
		}
	})
	return n
}

// docBlock returns the fenced block that follows <!-- marker --> in
// docs/metal.md.
func docBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "metal.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)<!-- ` + regexp.QuoteMeta(marker) + ` -->\s*` + "```" + `[a-z]*\n(.*?)` + "```").FindSubmatch(b)
	require.NotNil(t, m, "docs/metal.md has no block after <!-- %s -->", marker)
	// The block is indented inside a list item.
	lines := strings.Split(string(m[1]), "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// mockSite starts three BMCs, two Redfish (DMTF's rackmount1 mockup) and
// one IPMI (go-ipmi's reference BMC), and writes the site inventory and
// credential that name them.
func mockSite(t *testing.T) (inventory string, rf []*bmctest.Redfish, ipmi *bmctest.IPMI) {
	return mockSiteWith(t, "admin", true)
}

// mockSiteWith names the BMCs' credential credRef; with files, the site
// agent has a credential file for it, otherwise only a command's
// secretRef can give it.
func mockSiteWith(t *testing.T, credRef string, files bool) (inventory string, rf []*bmctest.Redfish, ipmi *bmctest.IPMI) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	require.NoError(t, os.Mkdir(creds, 0o700))
	if files {
		cb, _ := json.Marshal(map[string]string{"username": bmcUser, "password": bmcPassword})
		require.NoError(t, os.WriteFile(filepath.Join(creds, credRef+".json"), cb, 0o600))
	}
	var bmcs []map[string]any
	for _, id := range []string{"m1", "m2"} {
		r := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: bmcUser, Password: bmcPassword, Delay: 300 * time.Millisecond})
		host, port, _ := net.SplitHostPort(r.Listener.Addr().String())
		p, _ := strconv.Atoi(port)
		bmcs = append(bmcs, map[string]any{"id": id, "address": host, "providers": []string{"redfish"}, "credentialRef": credRef,
			"redfish": map[string]any{"port": p, "caFile": r.CAFile(t, dir)}})
		rf = append(rf, r)
	}
	ipmi = bmctest.NewIPMI(t, bmctest.IPMIOptions{Username: bmcUser, Password: bmcPassword, On: true, Delay: 300 * time.Millisecond})
	bmcs = append(bmcs, map[string]any{"id": "m3", "address": ipmi.Host, "providers": []string{"ipmi"}, "credentialRef": credRef, "ipmi": map[string]any{"port": ipmi.Port}})
	b, err := json.Marshal(map[string]any{"bmcs": bmcs, "credentials": map[string]any{"dir": creds}})
	require.NoError(t, err)
	inventory = filepath.Join(dir, "inventory.yaml")
	require.NoError(t, os.WriteFile(inventory, b, 0o600))
	return inventory, rf, ipmi
}

// "metal.power for 3 machines under a 2-of-3 quorum: nothing happens before
// the approvals, then each machine's BMC shows the change": the real
// bc-server with the metal module, a real site bcd (role site) running
// bc-kind-bmc, and three mock BMCs (two Redfish over TLS, one IPMI).
func TestE2E_MetalPowerUnderATwoOfThreeQuorum(t *testing.T) {
	c, keys := newMetalCluster(t)
	inventory, rf, ipmi := mockSite(t)
	s := c.joinSite(inventory)
	s.start()
	metalPowerUnderQuorum(t, c, s, keys, rf, ipmi)
}

// newMetalCluster is a control plane with signing on, three approvers
// (alice, bob, carol) of whom two must sign, and the metal kinds.
func newMetalCluster(t *testing.T) (*cluster, map[string]string) {
	dir := t.TempDir()
	var approvers []serverconfig.ApproverConfig
	keys := map[string]string{}
	for _, name := range []string{"alice", "bob", "carol"} {
		pub, priv, err := trust.NewEd25519()
		require.NoError(t, err)
		pp, err := trust.MarshalPublicKeyPEM(pub)
		require.NoError(t, err)
		kp, err := trust.MarshalPrivateKeyPEM(priv)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pub"), pp, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), kp, 0o600))
		approvers = append(approvers, serverconfig.ApproverConfig{Name: name, PublicKey: filepath.Join(dir, name+".pub")})
		keys[name] = filepath.Join(dir, name+".pem")
	}
	signing, _ := servertest.Signing(t)
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	keyFile := filepath.Join(dir, "secrets.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(hex.EncodeToString(key)), 0o600))
	c := newCluster(t, func(cfg *server.Config) {
		signing(cfg)
		cfg.PKI.Approvers, cfg.PKI.ApprovalThreshold = approvers, 2
		cfg.Secrets = &serverconfig.SecretsConfig{KeyFile: keyFile}
		metalKinds(t, cfg)
	})
	return c, keys
}

func metalPowerUnderQuorum(t *testing.T, c *cluster, s *node, keys map[string]string, rf []*bmctest.Redfish, ipmi *bmctest.IPMI) {
	out, stderr, code := c.cli("metal", "power", "--site", siteNode, "--machines", "m1,m2,m3", "--action", "off",
		"--reason", "Power off rack 4 for the PDU swap", "--idempotency-key", "rack4-off", "--json")
	require.Equal(t, 0, code, stderr)
	var run struct {
		ID, State, BatchID string
		Machines           []struct {
			Machine, State, CommandID string
			AwaitingApproval          bool
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &run))
	require.Equal(t, "awaiting-approval", run.State)
	require.Len(t, run.Machines, 3)
	for _, m := range run.Machines {
		require.Equal(t, "pending", m.State, m.Machine)
		require.True(t, m.AwaitingApproval, m.Machine)
	}
	// The batch's leaves name each machine: one leaf per machine on the
	// site agent, bound to the payload that names its BMC.
	b, err := apiv1.NewCommandBatchesClient(c.conn).Get(c.ctx(), &apiv1.GetCommandBatchRequest{TenantId: servertest.TenantA, BatchId: run.BatchID})
	require.NoError(t, err)
	require.Len(t, b.GetScope(), 3)
	for _, l := range b.GetScope() {
		require.Equal(t, siteNode, l.GetSubject())
		require.Equal(t, "bmc.power", l.GetKind())
		require.Len(t, l.GetPayloadSha256(), 64)
	}

	// The site agent's session is live and the gateway has gone through its
	// open commands: an unbatched sensors read on it finishes ...
	p, _ := structpb.NewStruct(map[string]any{"bmc": "m1", "events": 0})
	sensors, err := c.api.Run(c.ctx(), &apiv1.RunCommandRequest{TenantId: servertest.TenantA, NodeId: siteNode, Kind: "bmc.sensors", Payload: p})
	require.NoError(t, err)
	testutil.WaitFor(t, 60*time.Second, "the sensors read on the site agent", func() bool {
		got, err := c.api.Get(c.ctx(), &apiv1.GetCommandRequest{TenantId: servertest.TenantA, NodeId: siteNode, CommandId: sensors.GetId()})
		return err == nil && got.GetState() == "succeeded"
	})
	out, stderr, code = c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", run.BatchID, "--key", keys["alice"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 more approval(s) needed")
	// ... while nothing happens to the machines before the approvals.
	out, stderr, code = c.cli("metal", "get", run.ID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "awaiting-approval: 1 more approval(s) needed")
	require.Equal(t, 3, strings.Count(out, "held until the batch is approved"))
	for i, r := range rf {
		require.Empty(t, r.Requests(), "BMC m%d received nothing", i+1)
		require.Equal(t, "On", r.PowerState("437XR1138R2"))
	}
	require.Zero(t, ipmi.Chassis.Controls("power-down"))
	require.True(t, ipmi.Chassis.On())

	out, stderr, code = c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", run.BatchID, "--key", keys["carol"])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "is approved")
	testutil.WaitFor(t, 90*time.Second, "the run to succeed", func() bool {
		out, _, code = c.cli("metal", "get", run.ID, "--json")
		return code == 0 && strings.Contains(out, `"state": "succeeded"`) && strings.Count(out, `"state": "succeeded"`) >= 4
	})
	// Each machine's BMC shows the change.
	for i, r := range rf {
		require.Equal(t, "Off", r.PowerState("437XR1138R2"), "m%d", i+1)
		require.Equal(t, []string{"POST /redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset ForceOff"}, r.Requests())
	}
	require.False(t, ipmi.Chassis.On())
	require.Equal(t, 1, ipmi.Chassis.Controls("power-down"))

	out, stderr, code = c.cli("metal", "get", run.ID)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"STATE    succeeded", "m1", "m2", "m3", "via redfish; verified: Off", "via ipmi; verified: Off"} {
		require.Contains(t, out, want)
	}
	// The BMC password is in no command, result or log line.
	require.NotContains(t, s.logs.String(), bmcPassword)
	require.NotContains(t, out, bmcPassword)
	var leaked int
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM commands WHERE payload::text LIKE '%' || $1 || '%' OR result::text LIKE '%' || $1 || '%'`, bmcPassword).Scan(&leaked))
	require.Zero(t, leaked)

	// A retry with the same key returns the same run.
	out, stderr, code = c.cli("metal", "power", "--site", siteNode, "--machines", "m1,m2,m3", "--action", "off",
		"--reason", "Power off rack 4 for the PDU swap", "--idempotency-key", "rack4-off", "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, run.ID)
}

// metal.bulk boots every machine from PXE once and then cycles it: one
// approval of the run's batch covers both steps; each machine's cycle is
// queued only after its boot override was verified (the module is woken
// through River when the boot settles), and each BMC ends up set to PXE
// once, having been seen off and back on.
//
// The BMC credential is a tenant secret the run names (--secret-ref): the
// site agent has no credential file, and the password is in no command,
// run, event, result or log line.
func TestE2E_MetalBulkBootsFromPXEThenCycles(t *testing.T) {
	c, keys := newMetalCluster(t)
	inventory, rf, ipmi := mockSiteWith(t, "rack4-admin", false)
	s := c.joinSite(inventory)
	s.start()
	// As docs/metal.md stores it: secrets put with the JSON. The page pipes
	// it on standard input (--from-file -), which the CLI's docs test
	// (TestMetalGuideStoresTheCredentialFromStandardInput) runs as written;
	// here the same bytes come from a file, as the CLI's Env has no stdin.
	secret, _ := json.Marshal(map[string]string{"username": bmcUser, "password": bmcPassword})
	secretFile := filepath.Join(t.TempDir(), "rack4-admin.json")
	require.NoError(t, os.WriteFile(secretFile, secret, 0o600))
	_, stderr, code := c.cliAs(servertest.TokAdmin, "secrets", "put", "rack4-admin", "--from-file", secretFile)
	require.Equal(t, 0, code, stderr)
	out, stderr, code := c.cli("metal", "bulk", "--site", siteNode, "--machines", "m1,m2,m3", "--boot", "pxe", "--power", "cycle",
		"--reason", "Reinstall rack 4", "--secret-ref", "rack4-admin", "--json")
	require.Equal(t, 0, code, stderr)
	var run struct{ ID, State, BatchID string }
	require.NoError(t, json.Unmarshal([]byte(out), &run))
	require.Equal(t, "awaiting-approval", run.State)
	for _, k := range []string{"alice", "bob"} {
		_, stderr, code = c.cliAs(servertest.TokAdmin, "batch", "approve", "--batch", run.BatchID, "--key", keys[k])
		require.Equal(t, 0, code, stderr)
	}
	testutil.WaitFor(t, 120*time.Second, "the bulk run to succeed", func() bool {
		out, _, code = c.cli("metal", "get", run.ID, "--json")
		return code == 0 && strings.Count(out, `"state": "succeeded"`) == 7
	})
	for i, r := range rf {
		req := r.Requests()
		require.Len(t, req, 2, "m%d: %v", i+1, req)
		require.True(t, strings.HasPrefix(req[0], "PATCH /redfish/v1/Systems/437XR1138R2 "), "the boot override came first: %v", req)
		require.Contains(t, req[0], `"BootSourceOverrideTarget":"Pxe"`)
		require.Contains(t, req[0], `"BootSourceOverrideEnabled":"Once"`)
		require.Equal(t, "POST /redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset ForceRestart", req[1])
		require.Equal(t, "On", r.PowerState("437XR1138R2"))
	}
	f := ipmi.Chassis.BootFlags()
	require.NotNil(t, f)
	require.Equal(t, types.BootDeviceSelectorForcePXE, f.BootDeviceSelector)
	require.Equal(t, 1, ipmi.Chassis.Controls("power-cycle"))
	require.True(t, ipmi.Chassis.On())
	out, stderr, code = c.cli("metal", "get", run.ID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "STATE    succeeded")
	require.Equal(t, 6, strings.Count(out, "verified"))

	require.NotContains(t, s.logs.String(), bmcPassword)
	var leaked int
	require.NoError(t, c.srv.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM commands WHERE payload::text LIKE '%' || $1 || '%' OR result::text LIKE '%' || $1 || '%' OR position($1::bytea IN coalesce(command_bytes, ''::bytea)) > 0)
		+ (SELECT count(*) FROM metal_runs WHERE steps::text LIKE '%' || $1 || '%')
		+ (SELECT count(*) FROM outbox WHERE payload::text LIKE '%' || $1 || '%')`, bmcPassword).Scan(&leaked))
	require.Zero(t, leaked)
}
