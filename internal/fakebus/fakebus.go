// Package fakebus stands in for the system bus that node.reboot talks to: a
// private dbus-daemon, and logind's and systemd's managers as far as
// node.reboot calls them. The reboot tests serve them on a bus of their own,
// and internal/tools/fakelogind serves logind for make demo, so that neither
// can ever ask the host for a reboot.
package fakebus

import (
	"strconv"
	"sync"

	"github.com/godbus/dbus/v5"
)

// The names the fakes own and the manager interfaces they export: systemd's
// and logind's, written here from their D-Bus API documentation rather than
// taken from the reboot plugin, so that a typo in the plugin's names fails
// its tests instead of being copied into the fake (and internal/ stays
// neutral: it imports no plugin).
const (
	LogindService    = "org.freedesktop.login1"
	LogindPath       = "/org/freedesktop/login1"
	LogindInterface  = "org.freedesktop.login1.Manager"
	SystemdService   = "org.freedesktop.systemd1"
	SystemdPath      = "/org/freedesktop/systemd1"
	SystemdInterface = "org.freedesktop.systemd1.Manager"
)

// Logind is org.freedesktop.login1.Manager's Reboot: it records each call
// and answers with the error it was given (nil accepts the reboot).
type Logind struct {
	// refuse is the error every call gets; nil accepts.
	refuse *dbus.Error
	// onReboot, when set, hears each call after it is recorded.
	onReboot func(interactive bool)

	lock  sync.Mutex
	calls []bool // the interactive argument of each call
}

// Reboot records the call and answers it.
func (f *Logind) Reboot(interactive bool) *dbus.Error {
	f.lock.Lock()
	f.calls = append(f.calls, interactive)
	f.lock.Unlock()
	if f.onReboot != nil {
		f.onReboot(interactive)
	}
	return f.refuse
}

// Calls returns the interactive argument of each Reboot so far.
func (f *Logind) Calls() []bool {
	f.lock.Lock()
	defer f.lock.Unlock()
	return append([]bool(nil), f.calls...)
}

// ServeLogind exports a Logind on conn and owns logind's name, so that a
// call to logind on conn's bus reaches it. refuse, when not nil, is the
// error every call gets; onReboot, when not nil, hears each call.
func ServeLogind(conn *dbus.Conn, refuse *dbus.Error, onReboot func(interactive bool)) (*Logind, error) {
	f := &Logind{refuse: refuse, onReboot: onReboot}
	if err := serve(conn, LogindService, map[string]any{"Reboot": f.Reboot}, LogindPath, LogindInterface); err != nil {
		return nil, err
	}
	return f, nil
}

// Systemd is org.freedesktop.systemd1.Manager's StartUnit: it records each
// call and, after its reply, announces the job's end with JobRemoved and the
// result it was given, as systemd does when a job ends.
type Systemd struct {
	conn   *dbus.Conn
	result string

	lock  sync.Mutex
	units []string // "name mode" of each StartUnit
	next  uint32
}

// StartUnit queues a job and announces its end on a goroutine, after the
// reply, so the client sees the two in their real order.
func (f *Systemd) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	f.lock.Lock()
	f.next++
	id := f.next
	f.units = append(f.units, name+" "+mode)
	f.lock.Unlock()
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/" + strconv.FormatUint(uint64(id), 10))
	go func() {
		_ = f.conn.Emit(SystemdPath, SystemdInterface+".JobRemoved", id, job, name, f.result)
	}()
	return job, nil
}

// Units returns "name mode" of each StartUnit so far.
func (f *Systemd) Units() []string {
	f.lock.Lock()
	defer f.lock.Unlock()
	return append([]string(nil), f.units...)
}

// ServeSystemd exports a Systemd whose jobs end with result on conn and owns
// systemd's name.
func ServeSystemd(conn *dbus.Conn, result string) (*Systemd, error) {
	// conn is set before the export, so the handler goroutines see it.
	f := &Systemd{conn: conn, result: result}
	if err := serve(conn, SystemdService, map[string]any{"StartUnit": f.StartUnit}, SystemdPath, SystemdInterface); err != nil {
		return nil, err
	}
	return f, nil
}
