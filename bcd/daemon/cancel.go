package daemon

import (
	"fmt"
)

// Cancel asks a command to stop. A running command's plugin is told through
// its context and stops between actions; its real outcome is what is
// reported, so a side effect that already happened is never hidden. A
// command that has not started yet never runs. A finished command is left
// as it is. ErrNotFound means bcd never saw the command.
func (d *Daemon) Cancel(commandID string) error {
	d.lock.Lock()
	if e, ok := d.active[commandID]; ok {
		if !e.cancelRequested {
			e.cancelRequested = true
			if e.cancel != nil {
				e.cancel()
			}
			close(e.wake)
		}
		d.lock.Unlock()
		d.logger.Info("cancel requested", "command_id", commandID)
		return nil
	}
	d.lock.Unlock()
	_, found, err := d.journal.Get(commandID)
	if err != nil {
		return fmt.Errorf("cancel %s: %w", commandID, err)
	}
	if !found {
		return fmt.Errorf("cancel %s: %w", commandID, ErrNotFound)
	}
	return nil
}
