package bmctest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/clock"
	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/bougou/go-ipmi/pkg/types"
)

// IPMIOptions configure go-ipmi's reference BMC.
type IPMIOptions struct {
	Username, Password string
	// Delay is how long after a Chassis Control its power change applies
	// (a cycle goes off after Delay and on after twice Delay). 300 ms by
	// default.
	Delay time.Duration
	// On is the initial power state.
	On bool
	// Refuse lists the Chassis Controls the chassis does not support
	// (power-cycle, hard-reset, ...): the BMC answers them with completion
	// code 0xD5, as a real one does for a control it lacks.
	Refuse []string
}

// IPMI is go-ipmi's in-process reference BMC (pkg/bmc and pkg/server over
// UDP on loopback) with a chassis whose power changes after a delay.
type IPMI struct {
	// Host and Port are where it listens.
	Host    string
	Port    int
	Chassis *Chassis
	close   func()
}

// NewIPMI starts go-ipmi's BMC with one administrator; it stops with the
// test.
func NewIPMI(t testing.TB, opts IPMIOptions) *IPMI {
	t.Helper()
	i, err := StartIPMI(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(i.Close)
	return i
}

// StartIPMI starts go-ipmi's BMC with one administrator on loopback UDP,
// outside a test (bc-fake-bmc); Close stops it.
func StartIPMI(opts IPMIOptions) (*IPMI, error) {
	if opts.Delay == 0 {
		opts.Delay = 300 * time.Millisecond
	}
	h := &halWithChassis{HAL: mock.New(), chassis: &Chassis{Chassis: &mock.Chassis{}, delay: opts.Delay, on: opts.On, refuse: opts.Refuse}}
	info := bmc.DeviceInfo{DeviceID: 32, DeviceRevision: 1, FirmwareMajor: 1, IPMIVersion: 0x20,
		ManufacturerID: 0x000157, ProductID: 1, AdditionalDeviceSupport: 0x39}
	var guid [16]byte
	copy(guid[:], "bctest-ipmi-bmc0")
	b := bmc.New(info, guid, h, bmc.WithClock(clock.Real))
	u, err := b.Users.Add(2, opts.Username)
	if err != nil {
		return nil, fmt.Errorf("adding the IPMI user: %w", err)
	}
	u.SetPassword([]byte(opts.Password))
	u.Enabled = true
	u.ChannelAccess[1] = bmc.UserChannelAccess{MaxPrivilege: bmc.PrivilegeLevelAdministrator, Enabled: true}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("listening for IPMI: %w", err)
	}
	srv := server.NewServer(b, udp.Wrap(pc))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx)
	}()
	addr := pc.LocalAddr().(*net.UDPAddr)
	return &IPMI{Host: addr.IP.String(), Port: addr.Port, Chassis: h.chassis, close: func() {
		cancel()
		_ = pc.Close()
		<-done
	}}, nil
}

// Close stops the BMC.
func (i *IPMI) Close() {
	if i.close != nil {
		i.close()
	}
}

type halWithChassis struct {
	*mock.HAL
	chassis *Chassis
}

func (h *halWithChassis) Chassis() hal.ChassisHAL { return h.chassis }

// Chassis is go-ipmi's mock chassis (boot flags, identify) with power that
// changes after a delay, as a real chassis does.
type Chassis struct {
	*mock.Chassis
	delay  time.Duration
	refuse []string
	// mu guards on, pending and the counters.
	mu      sync.Mutex
	on      bool
	pending []powerChange
	// Controls counts the Chassis Control requests by name.
	controls map[string]int
}

type powerChange struct {
	at time.Time
	on bool
}

func (c *Chassis) applyLocked() {
	now := time.Now()
	for len(c.pending) > 0 && !c.pending[0].at.After(now) {
		c.on = c.pending[0].on
		c.pending = c.pending[1:]
	}
}

func (c *Chassis) schedule(name string, changes ...bool) error {
	if slices.Contains(c.refuse, name) {
		return types.CodeNotSupported
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.controls == nil {
		c.controls = map[string]int{}
	}
	c.controls[name]++
	now := time.Now()
	c.pending = nil
	for i, on := range changes {
		c.pending = append(c.pending, powerChange{at: now.Add(time.Duration(i+1) * c.delay), on: on})
	}
	return nil
}

// On reports the power state now.
func (c *Chassis) On() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applyLocked()
	return c.on
}

// Controls returns how many Chassis Controls of name were received
// (power-up, power-down, power-cycle, hard-reset, soft-shutdown).
func (c *Chassis) Controls(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.controls[name]
}

// BootFlags are the boot flags the BMC holds (nil before any were set).
func (c *Chassis) BootFlags() *types.BootOptionParam_BootFlags {
	f, err := c.Chassis.GetBootFlags(context.Background())
	if err != nil {
		return nil
	}
	return f
}

// PowerState implements hal.ChassisHAL.
func (c *Chassis) PowerState(context.Context) (bool, error) { return c.On(), nil }

// SetPower implements hal.ChassisHAL: power up or down after the delay.
func (c *Chassis) SetPower(_ context.Context, on bool) error {
	name := "power-down"
	if on {
		name = "power-up"
	}
	return c.schedule(name, on)
}

// PowerCycle implements hal.ChassisHAL: off after the delay, on after twice.
func (c *Chassis) PowerCycle(context.Context) error {
	return c.schedule("power-cycle", false, true)
}

// ColdReset implements hal.ChassisHAL (go-ipmi routes hard-reset here).
func (c *Chassis) ColdReset(context.Context) error {
	return c.schedule("hard-reset", false, true)
}

// WarmReset implements hal.ChassisHAL (go-ipmi routes soft-shutdown here):
// the operating system shuts down, then power goes off.
func (c *Chassis) WarmReset(context.Context) error {
	return c.schedule("soft-shutdown", false)
}
