// Package bmc is bc-kind-bmc: bmc.power, bmc.boot and bmc.sensors, run by a
// site agent (a bcd with role site on a management host) against the BMCs
// its site inventory names. Each kind tries the BMC's providers in the
// inventory's order (Redfish through gofish, IPMI through go-ipmi), each
// with its own timeout, and puts which were tried and which worked in the
// result. A power action or a boot override is done only when a later read
// agrees; otherwise it fails with what the BMC last said.
package bmc

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/plugins/bmc/manifest"
	"github.com/better-compute/commands/plugins/internal/site"
	"github.com/better-compute/commands/sdk/kind"
)

// Environment variables that configure bc-kind-bmc (bcd's pluginEnv).
const (
	EnvProviderTimeout = "BCD_BMC_PROVIDER_TIMEOUT"
	EnvVerifyTimeout   = "BCD_BMC_VERIFY_TIMEOUT"
	EnvPollInterval    = "BCD_BMC_POLL_INTERVAL"
)

// Defaults. Rufio polls a power task every 3 s and gives up after 10 min;
// a BMC answers a read in well under the provider timeout.
const (
	DefaultProviderTimeout = 30 * time.Second
	DefaultVerifyTimeout   = 10 * time.Minute
	DefaultPollInterval    = 3 * time.Second
)

// Failure reasons of the bmc kinds.
const (
	ReasonUnknownBMC  = "bmc-unknown"
	ReasonInventory   = "site-inventory"
	ReasonCredential  = "bmc-credential"
	ReasonNotAllowed  = "bmc-not-allowed"
	ReasonUnreachable = "bmc-unreachable"
	ReasonUnverified  = "bmc-unverified"
	ReasonBadPayload  = "bad-payload"
)

// Config configures the plugin.
type Config struct {
	// Inventory is the site inventory file, read at each command so that an
	// edit applies without a restart.
	Inventory       string
	ProviderTimeout time.Duration
	VerifyTimeout   time.Duration
	PollInterval    time.Duration
}

// ConfigFromEnv reads the environment, naming a bad value.
func ConfigFromEnv() (Config, error) {
	c := Config{Inventory: os.Getenv(site.EnvInventory), ProviderTimeout: DefaultProviderTimeout,
		VerifyTimeout: DefaultVerifyTimeout, PollInterval: DefaultPollInterval}
	for _, v := range []struct {
		env string
		dst *time.Duration
	}{{EnvProviderTimeout, &c.ProviderTimeout}, {EnvVerifyTimeout, &c.VerifyTimeout}, {EnvPollInterval, &c.PollInterval}} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("%s=%q: want a positive duration such as 30s", v.env, s)
		}
		*v.dst = d
	}
	return c, nil
}

// Plugin runs the bmc kinds.
type Plugin struct {
	Config Config
	// Openers are the providers by name; New sets redfish and ipmi.
	Openers map[string]Opener
	// Credentials returns the credential source for a command. New's reads
	// the command's secretRefs first (the values bcd exchanged for them),
	// then the inventory's credentials.dir.
	Credentials func(inv *site.Inventory, req kind.Request) site.CredentialSource
	Logger      hclog.Logger
}

// New returns the plugin with the Redfish and IPMI providers.
func New(cfg Config, logger hclog.Logger) *Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Plugin{
		Config:  cfg,
		Openers: map[string]Opener{site.ProviderRedfish: OpenRedfish, site.ProviderIPMI: OpenIPMI},
		Credentials: func(inv *site.Inventory, req kind.Request) site.CredentialSource {
			return site.CommandSecrets{Secrets: req.Command.Secrets, Fallback: site.FileCredentials{Dir: inv.Credentials.Dir}}
		},
		Logger: logger,
	}
}

// Kinds are the plugin's kinds, for kind.Serve.
func (p *Plugin) Kinds() []kind.Kind {
	return []kind.Kind{
		{Manifest: manifest.Power, Handler: kind.HandlerFunc(p.power)},
		{Manifest: manifest.Boot, Handler: kind.HandlerFunc(p.boot)},
		{Manifest: manifest.Sensors, Handler: kind.HandlerFunc(p.sensors)},
	}
}

// target is what every bmc command starts with: the inventory entry and
// its credential.
func (p *Plugin) target(ctx context.Context, req kind.Request, id string) (site.BMC, site.Credential, error) {
	inv, err := site.LoadInventory(p.Config.Inventory)
	if err != nil {
		return site.BMC{}, site.Credential{}, kind.Fail(ReasonInventory, "%v", err)
	}
	b, err := inv.Lookup(id)
	if err != nil {
		return site.BMC{}, site.Credential{}, kind.Fail(ReasonUnknownBMC, "%v", err)
	}
	cred, err := p.Credentials(inv, req).Credential(ctx, b.CredentialRef)
	if err != nil {
		return site.BMC{}, site.Credential{}, kind.Fail(ReasonCredential, "BMC %s: %v", b.ID, err)
	}
	return b, cred, nil
}
