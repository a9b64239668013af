package gateway

import (
	"context"
	"time"

	"github.com/better-compute/commands/controlplane/internal/dbhealth"
)

// ProgressEvery is the least time between two progress writes of one
// command: a plugin may report every few milliseconds, the API shows about
// one step a second.
const ProgressEvery = time.Second

// progress stores a running command's step, at most once per
// ProgressEvery; a step that comes sooner waits (the newest wins) for the
// session's tick.
func (s *session) progress(ctx context.Context, commandID string, step []byte) (outcome, error) {
	if last, ok := s.progressAt[commandID]; ok && time.Since(last) < ProgressEvery {
		s.progressDue[commandID] = step
		return landed, nil
	}
	return s.writeProgress(ctx, commandID, step)
}

func (s *session) writeProgress(ctx context.Context, commandID string, step []byte) (outcome, error) {
	if _, err := s.g.queue.RecordProgress(ctx, s.g.pool, commandID, s.epoch, step); err != nil {
		if dbhealth.Transient(err) {
			// A step is not worth holding: the next one supersedes it.
			s.g.outage.Failed("storing progress", err)
			return landed, nil
		}
		s.logger.Debug("progress not stored", "command_id", commandID, "error", err)
		return landed, nil
	}
	s.progressAt[commandID] = time.Now()
	delete(s.progressDue, commandID)
	return landed, nil
}

// flushProgress writes the steps the throttle held back once their command
// may be written again.
func (s *session) flushProgress(ctx context.Context) error {
	if len(s.progressDue) == 0 {
		return nil // every idle session's tick: not even a map iterator
	}
	for id, step := range s.progressDue {
		if time.Since(s.progressAt[id]) < ProgressEvery {
			continue
		}
		if _, err := s.writeProgress(ctx, id, step); err != nil {
			return err
		}
	}
	return nil
}
