// Command bc-fake-bmc runs fake BMCs on loopback, so that the metal kinds
// (bmc.power, bmc.boot, bmc.sensors, site.httpProxy) can be tried on one
// machine without hardware: --redfish machines each with a Redfish BMC over
// TLS (DMTF's rackmount1 mockup with power and Boot override state,
// internal/bmctest) and --ipmi machines each with go-ipmi's reference BMC
// over UDP. It writes, in --dir, a site inventory that names them
// (site-inventory.yaml), their credential (credentials/fake-admin.json,
// mode 0600) and the Redfish certificates, then `ready` once every BMC
// answers; state.json holds each machine's power and boot state and
// `power` a line "MACHINE On|Off" for each, both rewritten when they
// change. It stops on SIGINT or SIGTERM.
//
//	bc-fake-bmc --dir "$DEMO/bmc"
//	bc-fake-bmc --dir "$DEMO/bmc" --redfish 3 --ipmi 0 --delay 1s
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/better-compute/commands/internal/bmctest"
)

// Files in --dir.
const (
	InventoryFile = "site-inventory.yaml"
	ReadyFile     = "ready"
	StateFile     = "state.json"
	// PowerFile is "MACHINE On|Off" per line, sorted, for a shell's grep.
	PowerFile = "power"
	// CredentialRef names the credential every fake BMC takes.
	CredentialRef = "fake-admin"
	// Username is the fake BMCs' administrator.
	Username = "admin"
)

// systemIDs are the ComputerSystem ids of the mockups.
var systemIDs = map[string]string{bmctest.Rackmount1: "437XR1138R2", bmctest.Catfish: "1"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	dir           string
	redfish, ipmi int
	delay         time.Duration
	mockup        string
	password      string
	stateEvery    time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("bc-fake-bmc", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.dir, "dir", "", "directory for the inventory, credential, certificates, ready and state.json (required)")
	fs.IntVar(&o.redfish, "redfish", 2, "machines with a Redfish BMC (fake-r1, fake-r2, …)")
	fs.IntVar(&o.ipmi, "ipmi", 1, "machines with an IPMI BMC (fake-i1, …)")
	fs.DurationVar(&o.delay, "delay", 300*time.Millisecond, "how long a power change takes to apply (a cycle: off after it, on after twice)")
	fs.StringVar(&o.mockup, "mockup", bmctest.Rackmount1, "the DMTF mockup the Redfish BMCs serve ("+bmctest.Rackmount1+" or "+bmctest.Catfish+")")
	fs.StringVar(&o.password, "password-file", "", "a file holding the BMCs' password (default: a random one, written only to the credential file)")
	fs.DurationVar(&o.stateEvery, "state-every", 100*time.Millisecond, "how often state.json is checked for a change")
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: bc-fake-bmc --dir DIR [--redfish N] [--ipmi N] [--delay D]\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(stderr, "bc-fake-bmc:", err)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "bc-fake-bmc", Output: stderr, TimeFormat: time.RFC3339})
	if err := serve(ctx, o, logger); err != nil {
		logger.Error("stopped", "error", err)
		return 1
	}
	return 0
}

func (o *options) check() error {
	switch {
	case o.dir == "":
		return errors.New("--dir is required")
	case o.redfish < 0 || o.ipmi < 0 || o.redfish+o.ipmi == 0 || o.redfish+o.ipmi > 100:
		return fmt.Errorf("--redfish %d and --ipmi %d: between 1 and 100 machines in all", o.redfish, o.ipmi)
	case systemIDs[o.mockup] == "":
		return fmt.Errorf("--mockup %q: not one of %s, %s", o.mockup, bmctest.Rackmount1, bmctest.Catfish)
	case o.delay < 0:
		return fmt.Errorf("--delay %s: must not be negative", o.delay)
	case o.stateEvery <= 0:
		return fmt.Errorf("--state-every %s: must be positive", o.stateEvery)
	}
	return nil
}

// password is the BMCs' password: the file's first line, or a random one.
func (o *options) passwordValue() (string, error) {
	if o.password == "" {
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	}
	b, err := os.ReadFile(o.password)
	if err != nil {
		return "", fmt.Errorf("--password-file: %w", err)
	}
	p := string(b)
	for i, r := range p {
		if r == '\n' || r == '\r' {
			p = p[:i]
			break
		}
	}
	if p == "" {
		return "", fmt.Errorf("--password-file %s is empty", o.password)
	}
	return p, nil
}

// machine is one fake BMC.
type machine struct {
	id      string
	redfish *bmctest.Redfish
	ipmi    *bmctest.IPMI
}

// serve starts the BMCs, writes the files and keeps state.json current
// until ctx ends.
func serve(ctx context.Context, o options, logger hclog.Logger) error {
	password, err := o.passwordValue()
	if err != nil {
		return err
	}
	creds := filepath.Join(o.dir, "credentials")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		return fmt.Errorf("making %s: %w", creds, err)
	}
	cb, err := json.Marshal(map[string]string{"username": Username, "password": password})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(creds, CredentialRef+".json"), cb, 0o600); err != nil {
		return fmt.Errorf("writing the credential: %w", err)
	}
	var machines []machine
	defer func() {
		for _, m := range machines {
			if m.redfish != nil {
				m.redfish.Close()
			}
			if m.ipmi != nil {
				m.ipmi.Close()
			}
		}
	}()
	var bmcs []map[string]any
	for i := 1; i <= o.redfish; i++ {
		r := bmctest.StartRedfish(bmctest.RedfishOptions{Mockup: o.mockup, Username: Username, Password: password, Delay: o.delay})
		m := machine{id: "fake-r" + strconv.Itoa(i), redfish: r}
		machines = append(machines, m)
		host, port, err := net.SplitHostPort(r.Listener.Addr().String())
		if err != nil {
			return err
		}
		ca, err := r.WriteCAFile(o.dir)
		if err != nil {
			return err
		}
		p, _ := strconv.Atoi(port)
		bmcs = append(bmcs, map[string]any{"id": m.id, "machine": m.id, "address": host, "providers": []string{"redfish"},
			"credentialRef": CredentialRef, "redfish": map[string]any{"port": p, "system": systemIDs[o.mockup], "caFile": ca},
			"proxy": map[string]any{"allow": []map[string]any{{"methods": []string{"GET"}, "path": "/redfish/v1/**"}}}})
		logger.Info("redfish BMC", "machine", m.id, "endpoint", r.URL, "system", systemIDs[o.mockup])
	}
	for i := 1; i <= o.ipmi; i++ {
		b, err := bmctest.StartIPMI(bmctest.IPMIOptions{Username: Username, Password: password, On: true, Delay: o.delay})
		if err != nil {
			return err
		}
		m := machine{id: "fake-i" + strconv.Itoa(i), ipmi: b}
		machines = append(machines, m)
		bmcs = append(bmcs, map[string]any{"id": m.id, "machine": m.id, "address": b.Host, "providers": []string{"ipmi"},
			"credentialRef": CredentialRef, "ipmi": map[string]any{"port": b.Port, "interface": "lanplus"}})
		logger.Info("IPMI BMC", "machine", m.id, "address", net.JoinHostPort(b.Host, strconv.Itoa(b.Port)))
	}
	// The inventory is YAML; JSON is YAML, and bcd's site plugins read it.
	inv, err := json.MarshalIndent(map[string]any{"bmcs": bmcs, "credentials": map[string]any{"dir": creds}}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.dir, InventoryFile), append(inv, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the inventory: %w", err)
	}
	last, err := writeState(o.dir, machines, o.mockup, nil)
	if err != nil {
		return err
	}
	ids := make([]string, len(machines))
	for i, m := range machines {
		ids[i] = m.id
	}
	ready, _ := json.Marshal(map[string]any{"machines": ids, "inventory": filepath.Join(o.dir, InventoryFile)})
	if err := os.WriteFile(filepath.Join(o.dir, ReadyFile), append(ready, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", ReadyFile, err)
	}
	logger.Info("ready", "machines", len(machines), "inventory", filepath.Join(o.dir, InventoryFile))
	t := time.NewTicker(o.stateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			logger.Info("stopping")
			return nil
		case <-t.C:
		}
		next, err := writeState(o.dir, machines, o.mockup, last)
		if err != nil {
			return err
		}
		if string(next) != string(last) {
			logger.Info("state changed", "state", string(next))
		}
		last = next
	}
}

// writeState writes state.json when it differs from last, and returns it.
func writeState(dir string, machines []machine, mockup string, last []byte) ([]byte, error) {
	st := map[string]any{}
	var power strings.Builder
	for _, m := range machines {
		switch {
		case m.redfish != nil:
			id := systemIDs[mockup]
			st[m.id] = map[string]any{"provider": "redfish", "power": m.redfish.PowerState(id), "boot": m.redfish.Boot(id),
				"requests": m.redfish.Requests()}
		case m.ipmi != nil:
			on := "Off"
			if m.ipmi.Chassis.On() {
				on = "On"
			}
			st[m.id] = map[string]any{"provider": "ipmi", "power": on, "bootFlags": m.ipmi.Chassis.BootFlags()}
		}
	}
	for _, m := range machines {
		fmt.Fprintf(&power, "%s %s\n", m.id, st[m.id].(map[string]any)["power"])
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if string(b) == string(last) {
		return b, nil
	}
	if err := writeFile(dir, StateFile, append(b, '\n')); err != nil {
		return nil, err
	}
	if err := writeFile(dir, PowerFile, []byte(power.String())); err != nil {
		return nil, err
	}
	return b, nil
}

// writeFile replaces dir/name through a rename: a reader sees the old
// file or the new, whole.
func writeFile(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
