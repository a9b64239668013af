package dbhealth_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/dbhealth"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/internal/pgtest"
)

// What a real PostgreSQL answers, and what a cut connection gives, are told
// apart: only the second is the database being away.
func TestUnreachableIsOnlyALostDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := pgtest.NewProxy(t)
	name := pgtest.Create(t)
	pool, err := pgxpool.NewWithConfig(ctx, proxy.Config(t, name))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var s string
	err = pool.QueryRow(ctx, `SELECT $1::text`, "a\x00b").Scan(&s)
	require.Error(t, err, "PostgreSQL refuses a NUL byte in text")
	require.False(t, dbhealth.Unreachable(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT 1/0`)
	require.False(t, dbhealth.Unreachable(err), "%v", err)
	require.False(t, dbhealth.Unreachable(fmt.Errorf("join token: ttl -1s is outside (0, 168h]")))
	require.False(t, dbhealth.Unreachable(nil))

	// A connection held across the cut drops mid-query; a new one is refused.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	proxy.Cut()
	_, err = conn.Exec(ctx, `SELECT 1`)
	conn.Release()
	require.True(t, dbhealth.Unreachable(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.True(t, dbhealth.Unreachable(err), "%v", err)
	require.True(t, dbhealth.Unreachable(errors.Join(fmt.Errorf("enqueueing: %w", err), errors.New("rolling back: conn closed"))))
	proxy.Restore()
}

// Transient takes a lost transaction race as worth retrying and a
// server's answer about the statement, or a refusal of ours, as not; what
// is neither it retries rather than drop.
func TestTransientRetriesAllButAnAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := pgtest.NewProxy(t)
	name := pgtest.Create(t)
	pool, err := pgxpool.NewWithConfig(ctx, proxy.Config(t, name))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	_, err = pool.Exec(ctx, `SELECT 1/0`)
	require.False(t, dbhealth.Transient(err), "%v", err)
	_, err = pool.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'lost a race' USING ERRCODE = '40001'; END $$`)
	require.True(t, dbhealth.Transient(err), "%v", err)
	require.False(t, dbhealth.Unreachable(err), "a serialization failure is an answer, not a lost database")
	require.False(t, dbhealth.Transient(fmt.Errorf("storing: %w", errcode.Newf(errcode.NotFound, "node-not-found", nil, "node n not found"))))
	require.True(t, dbhealth.Transient(errors.New("something unforeseen")))

	proxy.Cut()
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.True(t, dbhealth.Transient(err), "%v", err)
	proxy.Restore()
}

type syncBuf struct {
	lock sync.Mutex
	b    bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return s.b.String()
}

// An outage of many failures logs two lines: its start with the first
// error, and its end with the counts.
func TestOutageLogsOnceAndItsEndOnce(t *testing.T) {
	t.Parallel()
	buf := &syncBuf{}
	o := dbhealth.New(hclog.New(&hclog.LoggerOptions{Output: buf}), "API requests fail with UNAVAILABLE", dbhealth.ByOperation())
	o.OK()
	require.Empty(t, buf.String(), "no outage, nothing to say")
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			op := "commands.run"
			if i%4 == 0 {
				op = "commands.get"
			}
			o.Failed(op, errors.Join(errors.New("unexpected EOF"), errors.New("rolling back: conn closed")))
		}(i)
	}
	wg.Wait()
	require.True(t, o.Down())
	o.OK()
	o.OK()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	require.Contains(t, lines[0], "database unreachable; API requests fail with UNAVAILABLE until it returns")
	require.Contains(t, lines[0], "unexpected EOF; rolling back: conn closed", "a joined error stays on one line")
	require.Contains(t, lines[1], "database reachable again")
	require.Contains(t, lines[1], "failed_operations=100")
	require.Contains(t, lines[1], `by_operation="commands.run=75, commands.get=25"`)
	require.False(t, o.Down())
}

// Without ByOperation the end line gives the failures in all and each count
// asked for, zero included; a count outside an outage counts nothing.
func TestOutageCountsWhatItWasAsked(t *testing.T) {
	t.Parallel()
	buf := &syncBuf{}
	o := dbhealth.New(hclog.New(&hclog.LoggerOptions{Output: buf}), "holding node reports and retrying",
		dbhealth.WithCount("reports_held"), dbhealth.WithCount("retries"))
	o.Count("reports_held")
	o.Failed("beginning a session", errors.New("dial tcp: connection refused"))
	o.Failed("storing progress", errors.New("dial tcp: connection refused"))
	o.Count("reports_held")
	o.Count("reports_held")
	o.OK()
	o.Failed("beginning a session", errors.New("dial tcp: connection refused"))
	o.OK()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4, buf.String())
	require.Contains(t, lines[0], "[WARN]  database unreachable; holding node reports and retrying until it returns: operation=\"beginning a session\"")
	require.Regexp(t, `\[INFO\]  database reachable again: outage=\S+ failed_operations=2 reports_held=2 retries=0$`, lines[1])
	require.Regexp(t, `failed_operations=1 reports_held=0 retries=0$`, lines[3], "each outage counts afresh")
	require.NotContains(t, buf.String(), "by_operation")
}
