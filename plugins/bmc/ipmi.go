package bmc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	ipmi "github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/better-compute/commands/plugins/internal/site"
)

// ipmiControls maps a power action to the Chassis Control command.
var ipmiControls = map[string]chassis.ChassisControl{
	"on":    chassis.ChassisControlPowerUp,
	"off":   chassis.ChassisControlPowerDown,
	"soft":  chassis.ChassisControlSoftShutdown,
	"cycle": chassis.ChassisControlPowerCycle,
	"reset": chassis.ChassisControlHardReset,
}

var ipmiControlNames = map[chassis.ChassisControl]string{
	chassis.ChassisControlPowerUp:      "chassis control power-up",
	chassis.ChassisControlPowerDown:    "chassis control power-down",
	chassis.ChassisControlSoftShutdown: "chassis control soft-shutdown",
	chassis.ChassisControlPowerCycle:   "chassis control power-cycle",
	chassis.ChassisControlHardReset:    "chassis control hard-reset",
}

var ipmiBootDevices = map[BootDevice]types.BootDeviceSelector{
	DevicePXE:  types.BootDeviceSelectorForcePXE,
	DeviceDisk: types.BootDeviceSelectorForceHardDrive,
	DeviceCD:   types.BootDeviceSelectorForceCDROM,
}

// ipmiProvider drives one BMC over IPMI on LAN (RMCP+ by default).
type ipmiProvider struct {
	c *ipmi.Client
}

// OpenIPMI opens an IPMI session to b at its pinned address. go-ipmi
// dials the address it is given, so no name is resolved.
func OpenIPMI(ctx context.Context, b site.BMC, cred site.Credential) (Provider, error) {
	ip, err := b.IP()
	if err != nil {
		return nil, err
	}
	c, err := ipmi.NewClient(ip.String(), b.IPMIPort(), cred.Username, cred.Password)
	if err != nil {
		return nil, fmt.Errorf("IPMI client: %w", err)
	}
	intf := ipmi.InterfaceLanplus
	if b.IPMI.Interface == "lan" {
		intf = ipmi.InterfaceLan
	}
	c.WithInterface(intf).WithRetry(1)
	if dl, ok := ctx.Deadline(); ok {
		// One exchange must fit the provider's time with room for a retry.
		c.WithTimeout(max(time.Until(dl)/3, 100*time.Millisecond))
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("opening an IPMI session to %s:%d: %w", ip, b.IPMIPort(), err)
	}
	return &ipmiProvider{c: c}, nil
}

func (p *ipmiProvider) Name() string { return site.ProviderIPMI }

func (p *ipmiProvider) PowerState(ctx context.Context) (PowerState, error) {
	st, err := p.c.GetChassisStatus(ctx)
	if err != nil {
		return "", fmt.Errorf("IPMI Get Chassis Status: %w", err)
	}
	if st.PowerIsOn {
		return StateOn, nil
	}
	return StateOff, nil
}

func (p *ipmiProvider) Power(ctx context.Context, action string) (string, error) {
	ctl, ok := ipmiControls[action]
	if !ok {
		return "", fmt.Errorf("unknown power action %q", action)
	}
	name := ipmiControlNames[ctl]
	if _, err := p.c.ChassisControl(ctx, ctl); err != nil {
		if said, ok := refusal(err); ok {
			return name, &NotAllowedError{Provider: site.ProviderIPMI, What: "power action", Requested: action + " (" + name + ")", Said: said}
		}
		return name, fmt.Errorf("%s: %w", name, err)
	}
	return name, nil
}

// refusal reports whether err is the BMC refusing a request it does not
// support (rather than failing at it): IPMI lists no allowed values, only
// a completion code, which the result quotes.
func refusal(err error) (string, bool) {
	re, ok := types.IsResponseError(err)
	if !ok {
		return "", false
	}
	switch cc := re.CompletionCode(); cc {
	case types.CodeInvalidCommand, types.CodeParameterOutOfRange, types.CodeRequestDataFieldInvalid, types.CodeNotSupported, types.CodeParameterNotSupported:
		return fmt.Sprintf("completion code %#02x (%s)", uint8(cc), cc.Error()), true
	}
	return "", false
}

func (p *ipmiProvider) SetBoot(ctx context.Context, b BootSetting) (string, error) {
	sel, ok := ipmiBootDevices[b.Device]
	if !ok {
		return "", fmt.Errorf("unknown boot device %q", b.Device)
	}
	bt := types.BIOSBootTypeLegacy
	if b.UEFI {
		bt = types.BIOSBootTypeEFI
	}
	issued := fmt.Sprintf("boot flags %s persistent=%t efi=%t", sel, b.Persistent, b.UEFI)
	if err := p.c.SetBootDevice(ctx, sel, bt, b.Persistent); err != nil {
		if said, ok := refusal(err); ok {
			return issued, &NotAllowedError{Provider: site.ProviderIPMI, What: "boot device", Requested: string(b.Device), Said: said}
		}
		return issued, fmt.Errorf("IPMI Set System Boot Options: %w", err)
	}
	return issued, nil
}

func (p *ipmiProvider) Boot(ctx context.Context) (BootSetting, error) {
	flags := &types.BootOptionParam_BootFlags{}
	if err := p.c.GetSystemBootOptionsParamFor(ctx, flags); err != nil {
		return BootSetting{}, fmt.Errorf("IPMI Get System Boot Options: %w", err)
	}
	out := BootSetting{Persistent: flags.Persist, UEFI: flags.BIOSBootType == types.BIOSBootTypeEFI, Device: "none"}
	if flags.BootFlagsValid {
		out.Device = BootDevice(fmt.Sprintf("ipmi:%s", flags.BootDeviceSelector))
		for d, s := range ipmiBootDevices {
			if flags.BootDeviceSelector == s {
				out.Device = d
			}
		}
	}
	return out, nil
}

func (p *ipmiProvider) Sensors(ctx context.Context) ([]Sensor, error) {
	ss, err := p.c.GetSensors(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading sensors from the SDR repository: %w", err)
	}
	out := make([]Sensor, 0, len(ss))
	for _, s := range ss {
		x := Sensor{Name: strings.TrimSpace(s.Name), Units: s.SensorUnit.String(), Health: s.Status(), Type: s.SensorType.String()}
		if s.IsReadingValid() {
			v := s.Value
			x.Reading = &v
		}
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (p *ipmiProvider) Events(ctx context.Context, limit int) ([]Event, error) {
	sels, err := p.c.GetSELEntries(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the SEL: %w", err)
	}
	var out []Event
	for i := len(sels) - 1; i >= 0 && len(out) < limit; i-- {
		s := sels[i]
		e := Event{ID: fmt.Sprintf("%d", s.RecordID), Log: "SEL"}
		if s.Standard != nil {
			e.Created = s.Standard.Timestamp.UTC().Format(time.RFC3339)
			e.Severity = string(s.Standard.EventSeverity())
			e.Message = fmt.Sprintf("%s #%d: %s", s.Standard.SensorType, s.Standard.SensorNumber, s.Standard.EventString())
		} else {
			e.Message = fmt.Sprintf("record type %#x", uint8(s.RecordType))
		}
		out = append(out, e)
	}
	return out, nil
}

func (p *ipmiProvider) Close() { _ = p.c.Close(context.Background()) }
