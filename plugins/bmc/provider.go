package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/commands/plugins/internal/site"
)

// PowerState is what a BMC says about the machine's power: On, Off, or a
// transition (PoweringOn, PoweringOff) as the BMC names it.
type PowerState string

// The power states the verification compares.
const (
	StateOn  PowerState = "On"
	StateOff PowerState = "Off"
)

// BootDevice is a boot device as the payload names it.
type BootDevice string

// The boot devices.
const (
	DevicePXE  BootDevice = "pxe"
	DeviceDisk BootDevice = "disk"
	DeviceCD   BootDevice = "cd"
)

// BootSetting is a boot override: the device, once or every boot, UEFI or
// legacy.
type BootSetting struct {
	Device     BootDevice `json:"device"`
	Persistent bool       `json:"persistent"`
	UEFI       bool       `json:"uefi"`
}

// Sensor is one sensor reading.
type Sensor struct {
	Name    string   `json:"name"`
	Reading *float64 `json:"reading,omitempty"`
	Units   string   `json:"units,omitempty"`
	Health  string   `json:"health,omitempty"`
	Type    string   `json:"type,omitempty"`
}

// Event is one BMC event log entry.
type Event struct {
	ID       string `json:"id"`
	Created  string `json:"created,omitempty"`
	Severity string `json:"severity,omitempty"`
	Message  string `json:"message"`
	Log      string `json:"log,omitempty"`
}

// Provider is one protocol's access to one BMC (Redfish through gofish,
// IPMI through go-ipmi). It is the thin driver interface the kinds are
// written against; the tests run it against the protocols' own simulators.
type Provider interface {
	// Name is the provider's name in results: redfish or ipmi.
	Name() string
	// PowerState reads the machine's power state.
	PowerState(ctx context.Context) (PowerState, error)
	// Power issues action (on, off, soft, cycle, reset) and returns what it
	// sent the BMC (ForceRestart, chassis control power-cycle). An action
	// the BMC does not allow is a *NotAllowedError.
	Power(ctx context.Context, action string) (issued string, err error)
	// SetBoot sets a boot override and returns what it sent.
	SetBoot(ctx context.Context, b BootSetting) (issued string, err error)
	// Boot reads the boot override back.
	Boot(ctx context.Context) (BootSetting, error)
	// Sensors reads the sensors.
	Sensors(ctx context.Context) ([]Sensor, error)
	// Events reads up to limit of the newest event log entries.
	Events(ctx context.Context, limit int) ([]Event, error)
	// Close ends the provider's session.
	Close()
}

// Opener opens a provider for one BMC with its credential.
type Opener func(ctx context.Context, b site.BMC, cred site.Credential) (Provider, error)

// NotAllowedError is a BMC's refusal of a request it does not allow,
// with the values it says it allows (Redfish's @Redfish.AllowableValues).
type NotAllowedError struct {
	Provider  string   `json:"provider"`
	What      string   `json:"what"`
	Requested string   `json:"requested"`
	Allowed   []string `json:"allowed"`
	// Said is the BMC's own refusal where it lists no allowed values (an
	// IPMI completion code).
	Said string `json:"said,omitempty"`
}

func (e *NotAllowedError) Error() string {
	if len(e.Allowed) == 0 {
		return fmt.Sprintf("%s: the BMC refuses %s %s: %s", e.Provider, e.What, e.Requested, e.Said)
	}
	return fmt.Sprintf("%s: the BMC does not allow %s %s (it allows %s)", e.Provider, e.What, e.Requested, strings.Join(e.Allowed, ", "))
}

// Attempt is one provider's try.
type Attempt struct {
	Provider string `json:"provider"`
	Error    string `json:"error,omitempty"`
	// Millis is how long the try took.
	Millis int64 `json:"millis"`
}

// Metadata says which providers were tried and which one worked, as
// bmclib's Metadata does; every bmc.* result carries it.
type Metadata struct {
	ProvidersAttempted []string  `json:"providersAttempted"`
	SuccessfulProvider string    `json:"successfulProvider,omitempty"`
	Attempts           []Attempt `json:"attempts"`
}

// ErrAllProvidersFailed is returned when no provider did the work.
var ErrAllProvidersFailed = errors.New("every provider failed")

// withProviders opens the BMC's providers in the inventory's order and
// runs fn on each until one succeeds. Each provider gets its own timeout,
// which covers opening it and fn; a provider that fails or times out is
// recorded and the next one is tried. fn's provider stays open for the
// caller's verification and is closed by the returned func.
func (p *Plugin) withProviders(ctx context.Context, b site.BMC, cred site.Credential, fn func(context.Context, Provider) error) (Provider, Metadata, func(), error) {
	md := Metadata{ProvidersAttempted: []string{}, Attempts: []Attempt{}}
	var errs []error
	for _, name := range b.Providers {
		open, ok := p.Openers[name]
		if !ok {
			continue
		}
		md.ProvidersAttempted = append(md.ProvidersAttempted, name)
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, p.Config.ProviderTimeout)
		prov, err := open(pctx, b, cred)
		if err == nil {
			err = fn(pctx, prov)
			if err != nil {
				prov.Close()
			}
		}
		if err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within the provider timeout of %s: %w", p.Config.ProviderTimeout, err)
		}
		cancel()
		a := Attempt{Provider: name, Millis: time.Since(start).Milliseconds()}
		if err != nil {
			a.Error = err.Error()
			md.Attempts = append(md.Attempts, a)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			p.Logger.Debug("provider failed", "bmc", b.ID, "provider", name, "error", err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		md.Attempts = append(md.Attempts, a)
		md.SuccessfulProvider = name
		return prov, md, prov.Close, nil
	}
	if len(errs) == 0 {
		return nil, md, func() {}, fmt.Errorf("%w: BMC %s lists no provider this agent has (%s)", ErrAllProvidersFailed, b.ID, strings.Join(b.Providers, ", "))
	}
	return nil, md, func() {}, fmt.Errorf("%w: %w", ErrAllProvidersFailed, errors.Join(errs...))
}
