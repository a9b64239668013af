// Package notify is bcd's side of systemd's service protocol (sd_notify):
// READY=1 once the daemon serves, STOPPING=1 when it begins to stop, and
// WATCHDOG=1 at half the unit's WatchdogSec while a health check passes.
//
// The unit (packaging/bcd/bcd.service) is Type=notify with WatchdogSec set,
// so systemd waits for Ready before ordering dependants after bcd, and
// restarts bcd (Restart=on-failure) when the pings stop. Outside systemd
// (NOTIFY_SOCKET unset: a shell, a test, `bcd exec`) every call is a no-op.
package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-hclog"
)

// Ready tells systemd that bcd has finished starting (READY=1). It reports
// whether systemd was told: false, with no error, outside systemd.
func Ready() (bool, error) {
	return send(daemon.SdNotifyReady)
}

// Stopping tells systemd that bcd is shutting down (STOPPING=1), so a slow
// drain is not mistaken for a hang. It reports whether systemd was told.
func Stopping() (bool, error) {
	return send(daemon.SdNotifyStopping)
}

// StartWatchdog starts pinging systemd's watchdog (WATCHDOG=1) at half the
// interval systemd asked for (WATCHDOG_USEC), the margin sd_watchdog_enabled(3)
// recommends. Before each ping it calls healthy; while healthy returns an
// error the pings are withheld, so a wedged daemon is restarted by systemd
// rather than kept alive by a timer that still ticks. The pinger stops when
// ctx ends.
//
// It returns the ping interval, or 0 when systemd did not enable the
// watchdog for this process (then nothing is started). A nil healthy counts
// as always healthy.
func StartWatchdog(ctx context.Context, logger hclog.Logger, healthy func() error) (time.Duration, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	timeout, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("notify: watchdog settings: %w", err)
	}
	if timeout <= 0 {
		return 0, nil
	}
	every := timeout / 2
	if healthy == nil {
		healthy = func() error { return nil }
	}
	logger = logger.Named("watchdog")
	logger.Debug("pinging the systemd watchdog", "timeout", timeout, "every", every)
	go ping(ctx, logger, every, healthy)
	return every, nil
}

// ping sends WATCHDOG=1 every tick while healthy passes, logging only when
// health changes so a long outage does not flood the journal.
func ping(ctx context.Context, logger hclog.Logger, every time.Duration, healthy func() error) {
	t := time.NewTicker(every)
	defer t.Stop()
	wasHealthy := true
	for {
		// Ping first, then wait: systemd's clock started when the process
		// did, and a first ping a whole tick late wastes half the margin.
		if err := healthy(); err != nil {
			if wasHealthy {
				logger.Warn("unhealthy: withholding watchdog pings; systemd restarts bcd if this lasts", "error", err)
			}
			wasHealthy = false
		} else {
			if !wasHealthy {
				logger.Info("healthy again: watchdog pings resume")
			}
			wasHealthy = true
			if _, err := send(daemon.SdNotifyWatchdog); err != nil {
				logger.Warn("watchdog ping failed", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// send writes one state to NOTIFY_SOCKET, keeping the environment so that
// later notifications (WATCHDOG=1 after READY=1) still find the socket.
func send(state string) (bool, error) {
	ok, err := daemon.SdNotify(false, state)
	if err != nil {
		return false, fmt.Errorf("notify: %s: %w", state, err)
	}
	return ok, nil
}
