package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/better-compute/commands/controlplane/errcode"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// outage logs a database outage once, when the first operation of any
// session fails for want of the database, and its end once, when one
// succeeds again, with what it cost in between. Thousands of sessions each
// polling, dispatching and landing reports would otherwise log a line or
// more per failed request for as long as the database is away.
type outage struct {
	logger hclog.Logger
	// down is read on every successful operation without the lock.
	down atomic.Bool

	// lock guards the counts below.
	lock     sync.Mutex
	since    time.Time
	failures int // operations that failed during the outage
	held     int // reports held for a retry during the outage
}

// failed records an operation that could not reach the database; the first
// of an outage logs it.
func (o *outage) failed(op string, err error) {
	o.lock.Lock()
	defer o.lock.Unlock()
	if !o.down.Load() {
		o.down.Store(true)
		o.since, o.failures, o.held = time.Now(), 0, 0
		o.logger.Warn("database unreachable; holding node reports and retrying until it returns", "operation", op, "error", err)
	}
	o.failures++
}

// heldReport counts a report held for a retry.
func (o *outage) heldReport() {
	o.lock.Lock()
	defer o.lock.Unlock()
	if o.down.Load() {
		o.held++
	}
}

// ok records an operation that reached the database; the first after an
// outage logs its end.
func (o *outage) ok() {
	if !o.down.Load() {
		return
	}
	o.lock.Lock()
	defer o.lock.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	o.logger.Info("database reachable again", "outage", time.Since(o.since).Round(time.Millisecond),
		"failed_operations", o.failures, "reports_held", o.held)
}

// unreachable reports whether err means the database did not answer (a
// refused or dropped connection, a server shutting down or starting, too
// many connections, a serialization failure): a retry may succeed. An error
// the server answered about the statement itself (bad data, a constraint)
// would only repeat.
func unreachable(err error) bool {
	var qe *errcode.Error
	if errors.As(err, &qe) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
		return false
	}
	return true
}

// dbErr handles the error of a database call that the session can skip: the
// next poll tries again. A lost database counts towards the outage, which
// is logged once; any other error is logged. It returns ctx's error once the
// session is over, and nil otherwise, so the session goes on.
func (s *session) dbErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		s.g.outage.ok()
		return nil
	}
	if unreachable(err) {
		s.g.outage.failed(op, err)
		return nil
	}
	s.logger.Warn(op, "error", err)
	return nil
}

// landErr classifies the error of storing a node's report: retry when the
// database is away (counted, logged once per outage), refused otherwise.
func (s *session) landErr(ctx context.Context, op string, u *agentv1.CommandUpdate, err error) (outcome, error) {
	if ctx.Err() != nil {
		return retry, ctx.Err()
	}
	if unreachable(err) {
		s.g.outage.failed(op, err)
		return retry, nil
	}
	s.logger.Error("the database refused a report; the node keeps it and sends it again", "command_id", u.GetCommandId(),
		"state", u.GetState(), "error", err)
	return refused, nil
}
