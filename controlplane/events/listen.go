package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultPoll is how often Listen wakes without a notification. NOTIFY is a
// hint: an event can be readable only after an older transaction ends, which
// sends nothing, so the poll is what guarantees progress.
const DefaultPoll = time.Second

// Listen returns a channel that receives a value whenever an event may have
// become readable: on a NOTIFY on Channel and every poll interval (0 means
// DefaultPoll). It holds one pooled connection for LISTEN, reconnects with a
// backoff when it is lost (polling meanwhile), and closes the channel when
// ctx ends. Wake-ups coalesce: a slow reader sees one, not a backlog.
func Listen(ctx context.Context, pool *pgxpool.Pool, poll time.Duration, logger hclog.Logger) <-chan struct{} {
	if poll <= 0 {
		poll = DefaultPoll
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("events.listen")
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(wake)
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := listenOnce(ctx, pool, poll, signal)
			if ctx.Err() != nil {
				return
			}
			logger.Warn("listen connection lost; polling until it is back", "error", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			signal()
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
	return wake
}

// listenOnce listens on one connection until it fails or ctx ends.
func listenOnce(ctx context.Context, pool *pgxpool.Pool, poll time.Duration, signal func()) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring a connection: %w", err)
	}
	// A connection that has LISTENed must not go back to the pool to serve
	// other queries with notifications queued on it.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+Channel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Anything committed before LISTEN took effect sent no notification to us.
	signal()
	for {
		wctx, cancel := context.WithTimeout(ctx, poll)
		_, err := pc.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			signal()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			signal()
		default:
			return fmt.Errorf("waiting for notification: %w", err)
		}
	}
}

// Follow calls fn for every event after cursor, in order, as they become
// readable, until ctx ends or fn fails. tenantID "" follows every tenant. It
// returns ctx's error or fn's; fn's cursor argument is where to resume.
func Follow(ctx context.Context, pool *pgxpool.Pool, tenantID, after string, poll time.Duration, logger hclog.Logger, fn func(Event) error) error {
	if _, _, err := ParseCursor(after); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := Listen(wctx, pool, poll, logger)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-wake:
			if !ok {
				return ctx.Err()
			}
		}
		for {
			evs, err := Read(ctx, pool, tenantID, after, MaxReadLimit)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// A failed read is retried on the next wake-up.
				if logger != nil {
					logger.Warn("reading events failed; retrying", "error", err)
				}
				break
			}
			for _, e := range evs {
				if err := fn(e); err != nil {
					return err
				}
				after = e.Cursor
			}
			if len(evs) < MaxReadLimit {
				break
			}
		}
	}
}
