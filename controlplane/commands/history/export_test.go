package history

import (
	"context"
	"time"
)

// SetCrash makes a stop at step ("object", "manifest", "delete") fail the
// hour as a process killed there would: nothing after it runs.
func (a *Archiver) SetCrash(f func(step string) error) { a.crash = f }

// HourKeys reads tenant's hour as the archiver does and returns, for each
// line, the key the archiver takes from the row's id and the one that
// parsing the line gives (recordKey).
func (a *Archiver) HourKeys(ctx context.Context, tenant string, hour time.Time) (fromID, parsed []string, err error) {
	h, err := a.readHour(ctx, tenant, hour)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range h.lines {
		_, k, err := recordKey(l)
		if err != nil {
			return nil, nil, err
		}
		parsed = append(parsed, k)
	}
	return h.keys, parsed, nil
}
