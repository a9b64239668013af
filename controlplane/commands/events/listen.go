package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/internal/backoff"
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
		// Waits double from 100 ms to 5 s and start again at 100 ms once
		// a connection listened (before, they never did).
		backoff.Loop(ctx, 100*time.Millisecond, 5*time.Second, func(ctx context.Context) (bool, error) {
			return listenOnce(ctx, pool, poll, signal)
		}, func(err error, wait time.Duration) {
			logger.Warn("listen connection lost; polling until it is back", "error", err, "retry_in", wait)
			signal() // the listener is down: whoever waits reads now
		})
	}()
	return wake
}

// listenOnce listens on one connection until it fails or ctx ends.
func listenOnce(ctx context.Context, pool *pgxpool.Pool, poll time.Duration, signal func()) (listened bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquiring a connection: %w", err)
	}
	// A connection that has LISTENed must not go back to the pool to serve
	// other queries with notifications queued on it.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+Channel); err != nil {
		return false, fmt.Errorf("listen: %w", err)
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
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			signal()
		default:
			return true, fmt.Errorf("waiting for notification: %w", err)
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
