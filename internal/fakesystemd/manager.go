package fakesystemd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// The names the Manager serves.
const (
	Service   = "org.freedesktop.systemd1"
	Path      = dbus.ObjectPath("/org/freedesktop/systemd1")
	Interface = "org.freedesktop.systemd1.Manager"
)

// property is one (sv) of StartTransientUnit's properties.
type property struct {
	Name  string
	Value dbus.Variant
}

// auxUnit is one (sa(sv)) of StartTransientUnit's auxiliary units.
type auxUnit struct {
	Name  string
	Props []property
}

// Unit is a service the Manager runs.
type Unit struct {
	// Name is the unit's name.
	Name string
	// Argv is called at each start for the command line, so a service
	// whose ExecStart goes through a symlink starts whatever it points at
	// then.
	Argv func() []string
	// Transient is set for units made by StartTransientUnit, which run once.
	Transient bool

	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
	starts  int
	// ExitCodes are the exit statuses of the unit's runs so far.
	exitCodes []int
}

// Manager is systemd's manager as daemon.upgrade uses it.
type Manager struct {
	conn *dbus.Conn
	env  []string
	out  io.Writer

	// ops serialises starts and stops, the automatic restart included, so
	// a service never runs twice.
	ops sync.Mutex
	// lock guards units and next.
	lock  sync.Mutex
	units map[string]*Unit
	next  uint32
	calls []string
}

// Serve exports a Manager on conn and owns systemd's name. Every process
// it starts gets env and writes to out.
func Serve(conn *dbus.Conn, env []string, out io.Writer) (*Manager, error) {
	m := &Manager{conn: conn, env: env, out: out, units: map[string]*Unit{}}
	methods := map[string]any{
		"StartTransientUnit": m.StartTransientUnit,
		"RestartUnit":        m.RestartUnit,
		"StartUnit":          m.StartUnit,
		"StopUnit":           m.StopUnit,
		"ResetFailedUnit":    m.ResetFailedUnit,
	}
	if err := conn.ExportMethodTable(methods, Path, Interface); err != nil {
		return nil, fmt.Errorf("exporting %s: %w", Interface, err)
	}
	reply, err := conn.RequestName(Service, dbus.NameFlagDoNotQueue)
	if err != nil {
		return nil, fmt.Errorf("owning %s: %w", Service, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return nil, fmt.Errorf("owning %s: someone else owns it", Service)
	}
	return m, nil
}

// AddService registers a service the Manager can start and restart.
func (m *Manager) AddService(name string, argv func() []string) {
	m.lock.Lock()
	defer m.lock.Unlock()
	m.units[name] = &Unit{Name: name, Argv: argv}
}

// job answers a method with a job path and announces the job's end with
// JobRemoved after the reply, as systemd does.
func (m *Manager) job(unit, result string) dbus.ObjectPath {
	m.lock.Lock()
	m.next++
	id := m.next
	m.lock.Unlock()
	path := dbus.ObjectPath("/org/freedesktop/systemd1/job/" + strconv.FormatUint(uint64(id), 10))
	go func() { _ = m.conn.Emit(Path, Interface+".JobRemoved", id, path, unit, result) }()
	return path
}

func (m *Manager) record(call string) {
	m.lock.Lock()
	m.calls = append(m.calls, call)
	m.lock.Unlock()
}

// Calls lists "Method unit" of each call so far.
func (m *Manager) Calls() []string {
	m.lock.Lock()
	defer m.lock.Unlock()
	return append([]string(nil), m.calls...)
}

func dbusErr(name, format string, args ...any) *dbus.Error {
	return dbus.NewError(name, []any{fmt.Sprintf(format, args...)})
}

// StartTransientUnit runs the unit's ExecStart once, in a process group of
// its own.
func (m *Manager) StartTransientUnit(name, mode string, props []property, _ []auxUnit) (dbus.ObjectPath, *dbus.Error) {
	m.record("StartTransientUnit " + name)
	var argv []string
	for _, p := range props {
		if p.Name != "ExecStart" {
			continue
		}
		execs, ok := p.Value.Value().([][]any)
		if !ok || len(execs) != 1 || len(execs[0]) < 2 {
			return "", dbusErr("org.freedesktop.DBus.Error.InvalidArgs", "ExecStart %v is not one a(sasb) entry", p.Value)
		}
		args, ok := execs[0][1].([]string)
		if !ok || len(args) == 0 {
			return "", dbusErr("org.freedesktop.DBus.Error.InvalidArgs", "ExecStart argv %v", execs[0][1])
		}
		argv = args
	}
	if argv == nil {
		return "", dbusErr("org.freedesktop.DBus.Error.InvalidArgs", "transient unit %s without ExecStart", name)
	}
	m.lock.Lock()
	if u, ok := m.units[name]; ok && mode == "fail" && u.cmd != nil && !u.done() {
		m.lock.Unlock()
		return "", dbusErr("org.freedesktop.systemd1.UnitExists", "unit %s already exists", name)
	}
	u := &Unit{Name: name, Transient: true, Argv: func() []string { return argv }}
	m.units[name] = u
	m.lock.Unlock()
	if err := m.start(u); err != nil {
		return "", dbusErr("org.freedesktop.systemd1.ExecFailed", "%v", err)
	}
	return m.job(name, "done"), nil
}

// StartUnit starts a registered service that is not running.
func (m *Manager) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	m.record("StartUnit " + name)
	m.ops.Lock()
	defer m.ops.Unlock()
	u, derr := m.unit(name)
	if derr != nil {
		return "", derr
	}
	m.lock.Lock()
	running := u.running()
	m.lock.Unlock()
	if !running {
		if err := m.start(u); err != nil {
			return m.job(name, "failed"), nil
		}
	}
	return m.job(name, "done"), nil
}

// RestartUnit stops the service (its whole process group) and starts it.
func (m *Manager) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	m.record("RestartUnit " + name)
	m.ops.Lock()
	defer m.ops.Unlock()
	u, derr := m.unit(name)
	if derr != nil {
		return "", derr
	}
	m.stop(u)
	if err := m.start(u); err != nil {
		return m.job(name, "failed"), nil
	}
	return m.job(name, "done"), nil
}

// StopUnit stops the service.
func (m *Manager) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	m.record("StopUnit " + name)
	m.ops.Lock()
	defer m.ops.Unlock()
	u, derr := m.unit(name)
	if derr != nil {
		return "", derr
	}
	m.stop(u)
	return m.job(name, "done"), nil
}

// ResetFailedUnit is accepted for any known unit.
func (m *Manager) ResetFailedUnit(name string) *dbus.Error {
	m.record("ResetFailedUnit " + name)
	_, derr := m.unit(name)
	return derr
}

func (m *Manager) unit(name string) (*Unit, *dbus.Error) {
	m.lock.Lock()
	defer m.lock.Unlock()
	u, ok := m.units[name]
	if !ok {
		return nil, dbusErr("org.freedesktop.systemd1.NoSuchUnit", "Unit %s not loaded.", name)
	}
	return u, nil
}

func (u *Unit) done() bool {
	select {
	case <-u.exited:
		return true
	default:
		return false
	}
}

func (u *Unit) running() bool { return u.cmd != nil && !u.done() }

// start runs the unit's command in its own process group; a service that
// dies without being stopped is started again (Restart=on-failure), and
// what is left of its group is killed (KillMode=control-group).
func (m *Manager) start(u *Unit) error {
	argv := u.Argv()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), m.env...)
	cmd.Stdout, cmd.Stderr = m.out, m.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	m.lock.Lock()
	u.cmd, u.exited, u.stopped = cmd, exited, false
	u.starts++
	m.lock.Unlock()
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		// KillMode=control-group: nothing of the run outlives it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		m.lock.Lock()
		u.exitCodes = append(u.exitCodes, code)
		m.lock.Unlock()
		close(exited)
		if u.Transient {
			return
		}
		m.ops.Lock()
		defer m.ops.Unlock()
		m.lock.Lock()
		again := !u.stopped && u.cmd == cmd
		m.lock.Unlock()
		if again {
			_ = m.start(u)
		}
	}()
	return nil
}

// stop sends SIGTERM to the unit's group and SIGKILL after 30 s.
func (m *Manager) stop(u *Unit) {
	m.lock.Lock()
	cmd, exited := u.cmd, u.exited
	u.stopped = true
	m.lock.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// Kill9 kills the service's main process with SIGKILL, as a crash would;
// the Manager starts it again. It returns the pid killed, or 0 when the
// service was not running.
func (m *Manager) Kill9(name string) int {
	m.lock.Lock()
	u, ok := m.units[name]
	var cmd *exec.Cmd
	if ok && u.running() {
		cmd = u.cmd
	}
	m.lock.Unlock()
	if cmd == nil {
		return 0
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	return cmd.Process.Pid
}

// MainPID is the service's running main process, or 0.
func (m *Manager) MainPID(name string) int {
	m.lock.Lock()
	defer m.lock.Unlock()
	if u, ok := m.units[name]; ok && u.running() {
		return u.cmd.Process.Pid
	}
	return 0
}

// Starts counts the unit's starts.
func (m *Manager) Starts(name string) int {
	m.lock.Lock()
	defer m.lock.Unlock()
	if u, ok := m.units[name]; ok {
		return u.starts
	}
	return 0
}

// ExitCodes are the exit statuses of the unit's finished runs.
func (m *Manager) ExitCodes(name string) []int {
	m.lock.Lock()
	defer m.lock.Unlock()
	if u, ok := m.units[name]; ok {
		return append([]int(nil), u.exitCodes...)
	}
	return nil
}

// TransientDone reports whether the transient unit name ran and exited.
func (m *Manager) TransientDone(name string) bool {
	m.lock.Lock()
	defer m.lock.Unlock()
	u, ok := m.units[name]
	return ok && u.cmd != nil && u.done()
}

// StopAll stops every running unit; tests call it at cleanup.
func (m *Manager) StopAll() {
	m.ops.Lock()
	defer m.ops.Unlock()
	m.lock.Lock()
	var us []*Unit
	for _, u := range m.units {
		us = append(us, u)
	}
	m.lock.Unlock()
	for _, u := range us {
		m.stop(u)
	}
}
