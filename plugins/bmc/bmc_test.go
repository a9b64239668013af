package bmc_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/internal/bmctest"
	"github.com/better-compute/commands/internal/testutil"
	"github.com/better-compute/commands/plugins/bmc"
	"github.com/better-compute/commands/plugins/bmc/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

const (
	user     = "admin"
	password = "s3cret-bmc-password"
	rack1    = "437XR1138R2"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupBuilds()
	os.Exit(code)
}

// siteEnv is a site agent's inventory and credentials in a temp dir.
type siteEnv struct {
	dir, inventory string
	bmcs           []map[string]any
}

func newSite(t *testing.T) *siteEnv {
	t.Helper()
	s := &siteEnv{dir: t.TempDir()}
	s.inventory = filepath.Join(s.dir, "inventory.yaml")
	creds := filepath.Join(s.dir, "credentials")
	require.NoError(t, os.Mkdir(creds, 0o700))
	b, _ := json.Marshal(map[string]string{"username": user, "password": password})
	require.NoError(t, os.WriteFile(filepath.Join(creds, "admin.json"), b, 0o600))
	return s
}

// addRedfish lists a Redfish BMC.
func (s *siteEnv) addRedfish(t *testing.T, id string, r *bmctest.Redfish, extra map[string]any) {
	host, port, err := net.SplitHostPort(r.Listener.Addr().String())
	require.NoError(t, err)
	p, _ := strconv.Atoi(port)
	e := map[string]any{"id": id, "address": host, "providers": []string{"redfish"}, "credentialRef": "admin",
		"redfish": map[string]any{"port": p, "caFile": r.CAFile(t, s.dir)}}
	for k, v := range extra {
		e[k] = v
	}
	s.bmcs = append(s.bmcs, e)
	s.write(t)
}

func (s *siteEnv) addIPMI(t *testing.T, id string, b *bmctest.IPMI) {
	s.bmcs = append(s.bmcs, map[string]any{"id": id, "address": b.Host, "providers": []string{"ipmi"}, "credentialRef": "admin",
		"ipmi": map[string]any{"port": b.Port}})
	s.write(t)
}

func (s *siteEnv) write(t *testing.T) {
	b, err := json.Marshal(map[string]any{"bmcs": s.bmcs, "credentials": map[string]any{"dir": filepath.Join(s.dir, "credentials")}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.inventory, b, 0o600))
}

func (s *siteEnv) plugin() *bmc.Plugin {
	return bmc.New(bmc.Config{Inventory: s.inventory, ProviderTimeout: 5 * time.Second, VerifyTimeout: 20 * time.Second,
		PollInterval: 50 * time.Millisecond}, hclog.NewNullLogger())
}

func run(t *testing.T, p *bmc.Plugin, k, payload string, out any) kind.Result {
	t.Helper()
	var m kind.Manifest
	var h kind.Handler
	for _, x := range p.Kinds() {
		if x.Manifest.Kind == k {
			m, h = x.Manifest, x.Handler
		}
	}
	v, err := kind.NewValidator(m)
	require.NoError(t, err)
	require.NoError(t, v.Validate([]byte(payload)))
	r := kind.Run(context.Background(), h, kind.Request{
		Command: kind.Command{ID: "cmd_1", Kind: k, Payload: json.RawMessage(payload)},
		Logger:  hclog.NewNullLogger(),
	})
	require.NotContains(t, string(r.Data)+r.Message, password, "the BMC credential is never returned")
	if out != nil && len(r.Data) > 0 {
		require.NoError(t, json.Unmarshal(r.Data, out))
	}
	return r
}

func TestManifests(t *testing.T) {
	for _, m := range manifest.All() {
		require.NoError(t, m.Validate())
		// "BMC kinds run on a site agent: a bcd with role site"
		require.Equal(t, []string{"site"}, m.Roles, m.Kind)
	}
	require.True(t, manifest.Power.Flags.Destructive)
	require.False(t, manifest.Power.Flags.RetrySafe, "a cycle run twice cycles twice")
	require.True(t, manifest.Sensors.Flags.RetrySafe)
	v, err := kind.NewValidator(manifest.Power)
	require.NoError(t, err)
	require.Error(t, v.Validate([]byte(`{"bmc":"m1","action":"explode"}`)))
	require.Error(t, v.Validate([]byte(`{"bmc":"../m1","action":"on"}`)))
}

// "bmc.power cycle ... succeed[s] and [is] verified by a later read": the
// DMTF mockup's BMC applies the restart after a delay (Off, then On), and
// the result is only succeeded once a read shows the machine back On
// after it was seen off.
func TestRedfishPowerCycleIsVerifiedByALaterRead(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, Delay: 300 * time.Millisecond})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	var res bmc.PowerResult
	r := run(t, s.plugin(), manifest.PowerKind, `{"bmc":"m1","action":"cycle"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	// rackmount1 allows no PowerCycle: cycle falls back to ForceRestart.
	require.Equal(t, "ForceRestart", res.Issued)
	require.Equal(t, []string{"POST /redfish/v1/Systems/" + rack1 + "/Actions/ComputerSystem.Reset ForceRestart"}, srv.Requests())
	require.True(t, res.Verified)
	require.Equal(t, bmc.StateOn, res.Before)
	require.Equal(t, bmc.StateOn, res.After)
	require.Contains(t, res.Observed, bmc.StateOff, "the cycle was seen off before it counted")
	require.GreaterOrEqual(t, res.VerifiedAfterMillis, int64(500), "the BMC applies the restart only after its delay; the plugin waited for it")
	require.Equal(t, []string{"redfish"}, res.ProvidersAttempted)
	require.Equal(t, "redfish", res.SuccessfulProvider)
	require.Equal(t, "On", srv.PowerState(rack1))
}

func TestRedfishPowerOffThenOn(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, Delay: 200 * time.Millisecond})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	p := s.plugin()
	var res bmc.PowerResult
	r := run(t, p, manifest.PowerKind, `{"bmc":"m1","action":"off"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, "ForceOff", res.Issued)
	require.Equal(t, "Off", srv.PowerState(rack1))
	// "Already off" counts as success and sends nothing.
	r = run(t, p, manifest.PowerKind, `{"bmc":"m1","action":"soft"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, "none", res.Issued)
	r = run(t, p, manifest.PowerKind, `{"bmc":"m1","action":"on"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, "On", res.Issued)
	require.Len(t, srv.Requests(), 2)
}

// "bmc.boot once-PXE succeed[s] and [is] verified by a later read".
func TestRedfishBootOncePXEIsVerified(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	p := s.plugin()
	var res bmc.BootResult
	// The mockup starts at Pxe/Once: move it away first, so the PXE read
	// proves the second PATCH.
	r := run(t, p, manifest.BootKind, `{"bmc":"m1","device":"disk","persistent":true}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, "Continuous", srv.Boot(rack1)["BootSourceOverrideEnabled"])
	r = run(t, p, manifest.BootKind, `{"bmc":"m1","device":"pxe"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.True(t, res.Verified)
	require.Equal(t, bmc.BootSetting{Device: bmc.DevicePXE, Persistent: false, UEFI: true}, *res.Read)
	got := srv.Boot(rack1)
	require.Equal(t, "Pxe", got["BootSourceOverrideTarget"])
	require.Equal(t, "Once", got["BootSourceOverrideEnabled"])
	require.Equal(t, "UEFI", got["BootSourceOverrideMode"])
	require.Equal(t, "redfish", res.SuccessfulProvider)
}

// "an action the BMC does not allow is refused with the BMC's allowable
// values": nothing is sent, and the result carries what the BMC allows.
func TestRedfishRefusesAnActionTheBMCDoesNotAllow(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, AllowedResetTypes: []string{"On", "ForceOff"}})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	var res bmc.PowerResult
	r := run(t, s.plugin(), manifest.PowerKind, `{"bmc":"m1","action":"cycle"}`, &res)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, bmc.ReasonNotAllowed, r.Reason)
	require.Contains(t, r.Message, "it allows On, ForceOff")
	require.NotNil(t, res.Refused)
	require.Equal(t, []string{"On", "ForceOff"}, res.Refused.Allowed)
	require.Empty(t, srv.Requests(), "nothing was sent to the BMC")

	// DMTF's Catfish BMC lists no Cd boot target.
	cat := bmctest.NewRedfish(t, bmctest.RedfishOptions{Mockup: bmctest.Catfish, Username: user, Password: password})
	s2 := newSite(t)
	s2.addRedfish(t, "cat", cat, nil)
	var bres bmc.BootResult
	r = run(t, s2.plugin(), manifest.BootKind, `{"bmc":"cat","device":"cd"}`, &bres)
	require.Equal(t, bmc.ReasonNotAllowed, r.Reason, r.Message)
	require.Equal(t, []string{"None", "Pxe", "Usb", "Hdd", "BiosSetup", "UefiTarget", "UefiHttp"}, bres.Refused.Allowed)
	require.Empty(t, cat.Requests())
}

// "A power action completes only when a later read agrees (or fails with
// what the BMC last said)."
func TestPowerThatNeverAppliesFailsWithWhatTheBMCLastSaid(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, Delay: time.Hour})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	p := s.plugin()
	p.Config.VerifyTimeout = 700 * time.Millisecond
	var res bmc.PowerResult
	r := run(t, p, manifest.PowerKind, `{"bmc":"m1","action":"off"}`, &res)
	require.Equal(t, kind.StatusFailed, r.Status)
	require.Equal(t, bmc.ReasonUnverified, r.Reason)
	require.Contains(t, r.Message, `last said "On"`)
	require.False(t, res.Verified)
	require.Equal(t, "ForceOff", res.Issued, "the action that was sent is reported, never hidden")
}

// The same over IPMI, against go-ipmi's own reference BMC.
func TestIPMIPowerCycleAndBootOncePXE(t *testing.T) {
	sim := bmctest.NewIPMI(t, bmctest.IPMIOptions{Username: user, Password: password, On: true, Delay: 300 * time.Millisecond})
	s := newSite(t)
	s.addIPMI(t, "m2", sim)
	p := s.plugin()
	var res bmc.PowerResult
	r := run(t, p, manifest.PowerKind, `{"bmc":"m2","action":"cycle"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, "chassis control power-cycle", res.Issued)
	require.Contains(t, res.Observed, bmc.StateOff)
	require.Equal(t, bmc.StateOn, res.After)
	require.GreaterOrEqual(t, res.VerifiedAfterMillis, int64(500))
	require.Equal(t, "ipmi", res.SuccessfulProvider)
	require.Equal(t, 1, sim.Chassis.Controls("power-cycle"))
	require.True(t, sim.Chassis.On())

	var bres bmc.BootResult
	r = run(t, p, manifest.BootKind, `{"bmc":"m2","device":"pxe"}`, &bres)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.True(t, bres.Verified)
	f := sim.Chassis.BootFlags()
	require.NotNil(t, f)
	require.Equal(t, types.BootDeviceSelectorForcePXE, f.BootDeviceSelector)
	require.False(t, f.Persist)
	require.Equal(t, types.BIOSBootTypeEFI, f.BIOSBootType)

	r = run(t, p, manifest.PowerKind, `{"bmc":"m2","action":"off"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.False(t, sim.Chassis.On())
}

// "try providers in order with per-provider timeouts and put which one was
// tried and which worked in the result": Redfish at an address that
// accepts connections and never answers times out; IPMI then works.
func TestProvidersAreTriedInOrderEachWithItsTimeout(t *testing.T) {
	sim := bmctest.NewIPMI(t, bmctest.IPMIOptions{Username: user, Password: password, On: true})
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = hang.Close() })
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	s := newSite(t)
	s.bmcs = append(s.bmcs, map[string]any{"id": "m3", "address": "127.0.0.1", "providers": []string{"redfish", "ipmi"}, "credentialRef": "admin",
		"redfish": map[string]any{"port": hang.Addr().(*net.TCPAddr).Port}, "ipmi": map[string]any{"port": sim.Port}})
	s.write(t)
	p := s.plugin()
	p.Config.ProviderTimeout = 500 * time.Millisecond
	var res bmc.PowerResult
	start := time.Now()
	r := run(t, p, manifest.PowerKind, `{"bmc":"m3","action":"on"}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, []string{"redfish", "ipmi"}, res.ProvidersAttempted)
	require.Equal(t, "ipmi", res.SuccessfulProvider)
	require.Len(t, res.Attempts, 2)
	require.Contains(t, res.Attempts[0].Error, "provider timeout of 500ms")
	require.Empty(t, res.Attempts[1].Error)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestSensorsAndEventLog(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	var res bmc.SensorsResult
	r := run(t, s.plugin(), manifest.SensorsKind, `{"bmc":"m1","events":10}`, &res)
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.Equal(t, "On", res.Power)
	require.NotEmpty(t, res.Sensors)
	names := map[string]bmc.Sensor{}
	for _, x := range res.Sensors {
		names[x.Name] = x
	}
	require.Contains(t, names, "CPU #1 Temperature", "sensors: %v", res.Sensors)
	require.NotNil(t, names["CPU #1 Temperature"].Reading)
	require.Equal(t, "Cel", names["CPU #1 Temperature"].Units)
	require.NotEmpty(t, res.Events)
	require.Equal(t, "Log1", res.Events[0].Log)
	require.Empty(t, res.EventsError)
}

func TestRefusalsNameWhatIsWrong(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, nil)
	p := s.plugin()
	r := run(t, p, manifest.PowerKind, `{"bmc":"m9","action":"on"}`, nil)
	require.Equal(t, bmc.ReasonUnknownBMC, r.Reason)
	require.Contains(t, r.Message, `"m9"`)
	require.Contains(t, r.Message, "m1")

	require.NoError(t, os.Chmod(filepath.Join(s.dir, "credentials", "admin.json"), 0o644))
	r = run(t, p, manifest.PowerKind, `{"bmc":"m1","action":"on"}`, nil)
	require.Equal(t, bmc.ReasonCredential, r.Reason)
	require.Contains(t, r.Message, "chmod 600")
	require.NoError(t, os.Chmod(filepath.Join(s.dir, "credentials", "admin.json"), 0o600))

	// A BMC that redirects is not followed: it is not the pinned one.
	red := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password, RedirectTo: "https://192.0.2.1/redfish/v1/"})
	s.addRedfish(t, "m5", red, nil)
	r = run(t, p, manifest.PowerKind, `{"bmc":"m5","action":"on"}`, nil)
	require.Equal(t, bmc.ReasonUnreachable, r.Reason)
	require.Contains(t, r.Message, "redirect")

	// A wrong password is the BMC's 401, with no password in the message.
	b, _ := json.Marshal(map[string]string{"username": user, "password": "wrong"})
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "credentials", "admin.json"), b, 0o600))
	r = run(t, p, manifest.PowerKind, `{"bmc":"m1","action":"on"}`, nil)
	require.Equal(t, bmc.ReasonUnreachable, r.Reason)
	require.True(t, strings.Contains(r.Message, "401"), r.Message)
	require.NotContains(t, r.Message, "wrong")
}

// Over IPMI, a BMC that lacks a Chassis Control answers with a completion
// code; the refusal quotes it, and the chassis is untouched.
func TestIPMIRefusesAControlTheBMCDoesNotSupport(t *testing.T) {
	sim := bmctest.NewIPMI(t, bmctest.IPMIOptions{Username: user, Password: password, On: true, Refuse: []string{"power-cycle"}})
	s := newSite(t)
	s.addIPMI(t, "m2", sim)
	var res bmc.PowerResult
	r := run(t, s.plugin(), manifest.PowerKind, `{"bmc":"m2","action":"cycle"}`, &res)
	require.Equal(t, bmc.ReasonNotAllowed, r.Reason, r.Message)
	require.Contains(t, r.Message, "completion code 0xd5")
	require.NotNil(t, res.Refused)
	require.Equal(t, "ipmi", res.Refused.Provider)
	require.Zero(t, sim.Chassis.Controls("power-cycle"))
	require.True(t, sim.Chassis.On())
}

// "BMC credentials are the first user" of secretRefs: a command that names
// the inventory's credentialRef in its secretRefs gets the credential from
// the value bcd exchanged for it, with no credential file on the site
// agent, and the value is in no result or message.
func TestCredentialFromTheCommandsSecretRef(t *testing.T) {
	srv := bmctest.NewRedfish(t, bmctest.RedfishOptions{Username: user, Password: password})
	s := newSite(t)
	s.addRedfish(t, "m1", srv, map[string]any{"credentialRef": "rack4-admin"})
	p := s.plugin()
	var h kind.Handler
	for _, k := range p.Kinds() {
		if k.Manifest.Kind == manifest.SensorsKind {
			h = k.Handler
		}
	}
	secret, _ := json.Marshal(map[string]string{"username": user, "password": password})
	r := kind.Run(context.Background(), h, kind.Request{Logger: hclog.NewNullLogger(), Command: kind.Command{ID: "cmd_1", Kind: manifest.SensorsKind,
		Payload: json.RawMessage(`{"bmc":"m1","events":1}`), Secrets: map[string][]byte{"rack4-admin": secret}}})
	require.Equal(t, kind.StatusSucceeded, r.Status, r.Message)
	require.NotContains(t, string(r.Data), password)

	// Without the secretRef, and without a credential file of that name,
	// the command says what to do.
	r = kind.Run(context.Background(), h, kind.Request{Logger: hclog.NewNullLogger(), Command: kind.Command{ID: "cmd_2", Kind: manifest.SensorsKind,
		Payload: json.RawMessage(`{"bmc":"m1"}`)}})
	require.Equal(t, bmc.ReasonCredential, r.Reason)
	require.Contains(t, r.Message, `no such credential`)
}
