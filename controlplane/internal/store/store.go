// Package store opens the control plane's PostgreSQL pool and brings its
// schema up to date. Migrations are embedded SQL files applied at start-up in
// name order, each once, each in its own transaction, under an advisory lock so
// that replicas starting together take turns instead of racing.
package store

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBTX is what queries run on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
// Functions that must be atomic with the caller's work take a pgx.Tx instead.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Open connects to the database named by dsn ("" reads the PG* environment
// variables), applies pending migrations and returns the pool.
func Open(ctx context.Context, dsn string, logger hclog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	return OpenConfig(ctx, cfg, logger)
}

// OpenConfig is Open with a parsed pool configuration, to which it applies
// ConfigurePool. The configuration's AfterConnect, when set, runs on each
// new connection only once the schema is migrated (it may prepare
// statements over the tables: queue.Warm), so the connections made before,
// the migration's, are closed once it is done.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config, logger hclog.Logger) (*pgxpool.Pool, error) {
	ConfigurePool(cfg)
	var migrated atomic.Bool
	if after := cfg.AfterConnect; after != nil {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if !migrated.Load() {
				return nil
			}
			return after(ctx, c)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	if err := Migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, err
	}
	migrated.Store(true)
	if cfg.AfterConnect != nil {
		pool.Reset()
	}
	return pool, nil
}

// CancelGrace is how long a write in progress when its context ends may
// still take to finish. See ConfigurePool.
const CancelGrace = 250 * time.Millisecond

// ConfigurePool sets what every control-plane pool needs beyond what a
// connection string says. Today that is one thing: how an operation whose
// context ends is interrupted. pgx by default sets the connection's
// deadline to that moment. A write in progress is then cut short, and on a
// TLS connection (sslmode prefer or require, the default against most
// servers) that breaks the connection's writing side for good: the
// Terminate that would end the session never reaches the server, pgx waits
// 15 s for the server to close, and the server keeps the transaction, with
// its row locks, open all that time. A sweeper stopped mid-sweep held the
// lease row so, and no other replica could take over for 15 s. Here a read
// still ends at once (a read cut short leaves the connection able to send
// its Terminate), and a write gets CancelGrace to finish (a statement's
// write takes microseconds).
func ConfigurePool(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return cancelHandler{conn: c.Conn()}
	}
}

// cancelHandler is ConfigurePool's ctxwatch.Handler.
type cancelHandler struct{ conn net.Conn }

func (h cancelHandler) HandleCancel(context.Context) {
	now := time.Now()
	_ = h.conn.SetReadDeadline(now)
	_ = h.conn.SetWriteDeadline(now.Add(CancelGrace))
}

func (h cancelHandler) HandleUnwatchAfterCancel() { _ = h.conn.SetDeadline(time.Time{}) }
