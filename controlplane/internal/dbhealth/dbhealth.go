// Package dbhealth tells a lost database from every other error, and logs
// an outage once: when the first operation fails for want of the database,
// and when one reaches it again, with what the outage cost in between. A
// control plane serving thousands of callers would otherwise log a line (or
// a multi-line joined error) per failed request for as long as PostgreSQL
// is away, burying the one line an operator needs. The API and the
// gateway's sessions each hold one Outage; they differ only in what they
// say and count.
package dbhealth

import (
	"errors"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Unreachable reports whether err means the database is not there right
// now, so that a retry may succeed: a connection refused, reset or dropped
// (no server error at all), a connection exception (class 08), an operator
// intervention such as a shutdown or a server still starting (57P), or too
// many connections (53300). Every other error, a server's answer about the
// statement or a bug of ours, is not: calling it "unavailable; retry"
// would send a client into retries that can only fail the same way.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || pe.Code == "53300"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgconn marks an error that happened before the query was sent (a
	// closed or busy connection) safe to retry.
	return pgconn.SafeToRetry(err)
}

// Transient reports whether err may go away if the same work is tried again
// later: the database did not answer (a refused or dropped connection, a
// server shutting down or starting, too many connections) or answered that
// the transaction lost a race (a serialization failure or deadlock, class
// 40). An error the server answered about the statement itself (bad data, a
// constraint) would only repeat, and so would a refusal of ours (an
// *errcode.Error). Unlike Unreachable, an error that is neither is taken as
// transient: the gateway, which keeps a node's report and retries it, would
// rather retry a surprise than drop a result.
func Transient(err error) bool {
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

// Outage logs a database outage once and its end once. It is safe for
// concurrent use; OK costs one atomic load while the database is up.
type Outage struct {
	logger hclog.Logger
	// what says what the outage costs ("failing API requests"), in the
	// first line.
	what string
	// byOp adds the failures by operation to the last line.
	byOp bool
	// keys are the names of the extra counts, in the order the last line
	// gives them.
	keys []string
	// down is read on every OK without the lock.
	down atomic.Bool

	// lock guards the fields below.
	lock     sync.Mutex
	since    time.Time
	failures int
	ops      map[string]int
	counts   map[string]int
}

// Option adds to what an Outage reports at its end.
type Option func(*Outage)

// ByOperation adds the failed operations' counts by name to the end line
// (by_operation="commands.run=75, commands.get=25"), for a caller with many
// kinds of request.
func ByOperation() Option { return func(o *Outage) { o.byOp = true } }

// WithCount adds a count that Count increments during an outage; the end
// line gives it under key, zero included, so an operator reading it knows
// nothing was missed.
func WithCount(key string) Option { return func(o *Outage) { o.keys = append(o.keys, key) } }

// New returns an Outage that logs to logger; what names what callers see
// meanwhile ("API requests fail with UNAVAILABLE").
func New(logger hclog.Logger, what string, opts ...Option) *Outage {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	o := &Outage{logger: logger, what: what}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// Failed records an operation that could not reach the database; the first
// of an outage logs it with its error, the others only count.
func (o *Outage) Failed(op string, err error) {
	o.lock.Lock()
	defer o.lock.Unlock()
	if !o.down.Load() {
		o.down.Store(true)
		o.since, o.failures, o.ops, o.counts = time.Now(), 0, map[string]int{}, map[string]int{}
		o.logger.Warn("database unreachable; "+o.what+" until it returns", "operation", op, "error", oneLine(err))
	}
	o.failures++
	o.ops[op]++
}

// OK records an operation that reached the database; the first after an
// outage logs its end, how long it lasted and how many operations failed.
func (o *Outage) OK() {
	if !o.down.Load() {
		return
	}
	o.lock.Lock()
	defer o.lock.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	args := []any{"outage", time.Since(o.since).Round(time.Millisecond), "failed_operations", o.failures}
	if o.byOp {
		args = append(args, "by_operation", o.opCounts())
	}
	for _, k := range o.keys {
		args = append(args, k, o.counts[k])
	}
	o.logger.Info("database reachable again", args...)
}

// Count adds one to the count named key (see WithCount) while an outage is
// in progress; outside one it does nothing, since the end line reports
// what the outage cost.
func (o *Outage) Count(key string) {
	o.lock.Lock()
	defer o.lock.Unlock()
	if o.down.Load() {
		o.counts[key]++
	}
}

// Down reports whether an outage is in progress.
func (o *Outage) Down() bool { return o.down.Load() }

// opCounts renders the per-operation counts on one line, most first.
func (o *Outage) opCounts() string {
	ops := make([]string, 0, len(o.ops))
	for op := range o.ops {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if o.ops[ops[i]] != o.ops[ops[j]] {
			return o.ops[ops[i]] > o.ops[ops[j]]
		}
		return ops[i] < ops[j]
	})
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = op + "=" + strconv.Itoa(o.ops[op])
	}
	return strings.Join(parts, ", ")
}

// oneLine keeps a joined error (an enqueue and its rollback) on one log line.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
