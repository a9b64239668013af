package gateway

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// reportsHeld is the outage's count of reports held for a retry, which the
// end of an outage logs.
const reportsHeld = "reports_held"

// newOutage returns the gateway's outage tracker: logged once when the first
// operation of any session fails for want of the database, and once when
// one succeeds again, with what it cost. Thousands of sessions each
// polling, dispatching and landing reports would otherwise log a line or
// more per failed request for as long as the database is away.
func newOutage(logger hclog.Logger) *dbhealth.Outage {
	return dbhealth.New(logger, "holding node reports and retrying", dbhealth.WithCount(reportsHeld))
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
		s.g.outage.OK()
		return nil
	}
	if dbhealth.Transient(err) {
		s.g.outage.Failed(op, err)
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
	if dbhealth.Transient(err) {
		s.g.outage.Failed(op, err)
		return retry, nil
	}
	s.logger.Error("the database refused a report; the node keeps it and sends it again", "command_id", u.GetCommandId(),
		"state", u.GetState(), "error", err)
	return refused, nil
}
