package reboot

import (
	"context"
	"fmt"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/hashicorp/go-hclog"
)

// The D-Bus names node.reboot calls.
const (
	LogindService   = "org.freedesktop.login1"
	LogindPath      = "/org/freedesktop/login1"
	LogindReboot    = "org.freedesktop.login1.Manager.Reboot"
	SystemdService  = "org.freedesktop.systemd1"
	SystemdPath     = "/org/freedesktop/systemd1"
	SystemdStart    = "org.freedesktop.systemd1.Manager.StartUnit"
	RebootTarget    = "reboot.target"
	RebootJobMode   = "replace-irreversibly" // systemctl reboot's job mode
	JobResultDone   = "done"
	ViaLogind       = "logind"
	ViaSystemdStart = "systemd"
)

// Outcome says how a reboot was asked for.
type Outcome struct {
	// Via is "logind" or "systemd": the path that accepted the reboot or,
	// with an error, the path that failed.
	Via string `json:"via"`
	// JobResult is systemd's job result on the fallback path ("done").
	JobResult string `json:"jobResult,omitempty"`
}

// Reboot asks logind's Manager.Reboot(interactive=false) for a reboot, with
// the error reply seen (go-systemd's login1 Reboot drops it). Only when
// logind is absent from the bus does it fall back to starting reboot.target
// in systemctl reboot's job mode, and then it waits for the job's result:
// "done" is success, anything else an error. On a real node a successful call
// is followed by the process being killed; the caller must have journalled
// the command with the boot id before calling. With an error, the Outcome
// still names the path that failed, for the command's result.
func Reboot(ctx context.Context, cfg Config, logger hclog.Logger) (Outcome, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	err := rebootLogind(ctx, cfg)
	if err == nil {
		logger.Info("logind accepted the reboot")
		return Outcome{Via: ViaLogind}, nil
	}
	if !serviceAbsent(err) {
		return Outcome{Via: ViaLogind}, err
	}
	logger.Warn("logind is not on the bus; starting reboot.target through systemd", "error", err)
	res, err := rebootSystemd(ctx, cfg)
	if err != nil {
		return Outcome{Via: ViaSystemdStart, JobResult: res}, err
	}
	logger.Info("systemd finished the reboot job", "result", res)
	return Outcome{Via: ViaSystemdStart, JobResult: res}, nil
}

// JobError says systemd's reboot job ended with a result other than "done".
type JobError struct {
	// Result is systemd's job result: canceled, timeout, failed, dependency, skipped.
	Result string
}

// Error names the job, its result and where to look.
func (e *JobError) Error() string {
	return fmt.Sprintf("systemd's %s job for %s ended %q, not %q: see `journalctl -b -u %s` on the node", RebootJobMode, RebootTarget, e.Result, JobResultDone, RebootTarget)
}

func rebootLogind(ctx context.Context, cfg Config) error {
	conn, err := cfg.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	call := conn.Object(LogindService, LogindPath).CallWithContext(ctx, LogindReboot, 0, false)
	if call.Err != nil {
		return callError(ctx, LogindReboot, call.Err)
	}
	return nil
}

func rebootSystemd(ctx context.Context, cfg Config) (string, error) {
	conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return cfg.dial(ctx) })
	if err != nil {
		return "", fmt.Errorf("connecting to systemd: %w", err)
	}
	defer conn.Close()
	// Buffered: go-systemd's dispatcher sends once and must never block.
	ch := make(chan string, 1)
	if _, err := conn.StartUnitContext(ctx, RebootTarget, RebootJobMode, ch); err != nil {
		return "", callError(ctx, SystemdStart, err)
	}
	select {
	case res := <-ch:
		if res != JobResultDone {
			return res, &JobError{Result: res}
		}
		return res, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for systemd's %s job: %w", RebootTarget, ctx.Err())
	}
}
