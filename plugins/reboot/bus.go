package reboot

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
)

// EnvBusAddress names the environment variable that points node.reboot at a
// D-Bus other than the system bus. Tests set it to a private dbus-daemon.
const EnvBusAddress = "BCD_SYSTEM_BUS_ADDRESS"

// D-Bus error names the kind tells apart.
const (
	ErrNameServiceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
	ErrNameNameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
	ErrNameAccessDenied   = "org.freedesktop.DBus.Error.AccessDenied"
	ErrNameInteractive    = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
)

// Config says which bus node.reboot talks to.
type Config struct {
	// BusAddress is a D-Bus address ("unix:path=…"); empty means the system bus.
	BusAddress string
}

// ConfigFromEnv reads EnvBusAddress.
func ConfigFromEnv() Config {
	return Config{BusAddress: os.Getenv(EnvBusAddress)}
}

// dial opens a private, authenticated connection that has said Hello.
func (c Config) dial(ctx context.Context) (*dbus.Conn, error) {
	if c.BusAddress == "" {
		conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("connecting to the system bus: %w", err)
		}
		return conn, nil
	}
	conn, err := dbus.Connect(c.BusAddress, dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connecting to D-Bus at %s: %w", c.BusAddress, err)
	}
	return conn, nil
}

// BusError is a D-Bus error reply to one of node.reboot's calls.
type BusError struct {
	// Call is the method called ("org.freedesktop.login1.Manager.Reboot").
	Call string
	// Name is the D-Bus error name ("org.freedesktop.DBus.Error.AccessDenied").
	Name string
	// Message is the error's text as the service sent it.
	Message string
}

// Error names the call, the D-Bus error and what to do about it.
func (e *BusError) Error() string {
	s := fmt.Sprintf("%s: %s", e.Call, e.Name)
	if e.Message != "" && e.Message != e.Name {
		s += ": " + e.Message
	}
	if h := e.hint(); h != "" {
		s += " (" + h + ")"
	}
	return s
}

func (e *BusError) hint() string {
	switch e.Name {
	case ErrNameAccessDenied, ErrNameInteractive:
		return "bcd must run as root, or polkit must allow its user org.freedesktop.login1.reboot and org.freedesktop.login1.reboot-multiple-sessions without interaction"
	}
	return ""
}

// busError turns a godbus error reply into a *BusError; other errors pass.
// callError is busError for a call made under ctx: once ctx is done, the
// call's error is the cancellation, whichever error the bus reported first.
// The connection is dialled under ctx and closes when it ends, so a cancelled
// call may fail with the closed connection's read error ("use of closed
// network connection") before godbus notices the context: without this the
// command would end failed instead of cancelled.
func callError(ctx context.Context, call string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w (the bus said: %w)", call, ctx.Err(), err)
	}
	return busError(call, err)
}

func busError(call string, err error) error {
	var de dbus.Error
	if errors.As(err, &de) {
		return &BusError{Call: call, Name: de.Name, Message: de.Error()}
	}
	var dep *dbus.Error
	if errors.As(err, &dep) && dep != nil {
		return &BusError{Call: call, Name: dep.Name, Message: dep.Error()}
	}
	return fmt.Errorf("%s: %w", call, err)
}

// serviceAbsent reports whether err says nobody owns the called name, the
// only case in which falling back from logind to systemd is right: any other
// refusal from logind (access denied, an inhibitor) must stand.
func serviceAbsent(err error) bool {
	var be *BusError
	if !errors.As(err, &be) {
		return false
	}
	return be.Name == ErrNameServiceUnknown || be.Name == ErrNameNameHasNoOwner
}
