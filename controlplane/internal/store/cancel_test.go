package store_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
	"github.com/better-compute/commands/internal/testutil"
)

// stallConn holds one armed Write until the connection's (write) deadline
// has been set, which is what pgx does when a context ends, so that a test
// can end a context in the middle of a write, deterministically.
type stallConn struct {
	net.Conn
	mu       sync.Mutex
	armed    bool
	writing  chan struct{} // closed when the armed write has begun
	deadline chan struct{} // closed by the first SetDeadline after that
}

func (c *stallConn) arm() (writing <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.writing, c.deadline = true, make(chan struct{}), make(chan struct{})
	return c.writing
}

func (c *stallConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	armed, writing, deadline := c.armed, c.writing, c.deadline
	c.armed = false
	c.mu.Unlock()
	if armed {
		close(writing)
		select {
		case <-deadline:
		case <-time.After(30 * time.Second):
			// No deadline came: let the write go, and the test fail on
			// what follows rather than hang.
		}
	}
	return c.Conn.Write(b)
}

// deadlineSet releases the armed write once a (write) deadline is set.
func (c *stallConn) deadlineSet(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline != nil && !c.armed && !t.IsZero() {
		select {
		case <-c.deadline:
		default:
			close(c.deadline)
		}
	}
}

func (c *stallConn) SetDeadline(t time.Time) error {
	c.deadlineSet(t)
	return c.Conn.SetDeadline(t)
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.deadlineSet(t)
	return c.Conn.SetWriteDeadline(t)
}

// A context that ends while a transaction's statement is being written
// must not leave the transaction, and its row locks, open on the server.
// pgx's default (the connection's deadline set the moment the context
// ends) cuts the write short, which breaks a TLS connection's writing side:
// its Terminate never reaches the server, and pgx then waits 15 s for the
// server to close, with the transaction open all that time. A sweeper
// leader stopped mid-sweep held the lease row so, and its successor could
// not take over for 15 s.
func TestAContextEndedMidWriteReleasesTheTransactionsLocksAtOnce(t *testing.T) {
	var (
		mu    sync.Mutex
		conns []*stallConn
	)
	pool := storetest.DBConfig(t, func(c *pgxpool.Config) {
		c.MinConns, c.MaxConns = 0, 2
		dial := c.ConnConfig.DialFunc
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			sc := &stallConn{Conn: nc}
			mu.Lock()
			conns = append(conns, sc)
			mu.Unlock()
			return sc, nil
		}
	})
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE leases (name text PRIMARY KEY, holder text)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO leases VALUES ('sweeper', 'a')`)
	require.NoError(t, err)

	for round := 0; round < 3; round++ {
		txCtx, cancel := context.WithCancel(ctx)
		tx, err := pool.Begin(txCtx)
		require.NoError(t, err)
		_, err = tx.Exec(txCtx, `UPDATE leases SET holder = 'a' WHERE name = 'sweeper'`)
		require.NoError(t, err)
		var backend uint32
		require.NoError(t, tx.QueryRow(txCtx, `SELECT pg_backend_pid()`).Scan(&backend))
		var sc *stallConn
		mu.Lock()
		for _, c := range conns {
			if unwraps(tx.Conn().PgConn().Conn(), c) {
				sc = c
			}
		}
		mu.Unlock()
		require.NotNil(t, sc, "the transaction's connection is one the dialer made")
		if _, ok := tx.Conn().PgConn().Conn().(*tls.Conn); !ok {
			// On plain TCP a write cut short leaves the connection able to
			// send its Terminate, so pgx's default passes too: there is
			// nothing to test. pg_virtualenv (make test, CI) serves TLS.
			t.Skip("the database does not use TLS (sslmode): the case this test pins is TLS's")
		}
		writing := sc.arm()
		done := make(chan error, 1)
		go func() {
			_, err := tx.Exec(txCtx, `UPDATE leases SET holder = 'a' WHERE name = 'sweeper'`)
			done <- err
		}()
		select {
		case <-writing:
		case <-time.After(30 * time.Second):
			t.Fatal("the statement's write never began")
		}
		cancel()
		// The statement either finishes (its write was let through) or
		// ends with its context; both are fine, the locks are the point.
		select {
		case err := <-done:
			if err != nil {
				require.ErrorIs(t, err, context.Canceled)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the statement did not return within 30 s of its context ending")
		}
		_ = tx.Rollback(txCtx)

		// Another holder's statement gets the row at once.
		func() {
			other, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer other.Release()
			_, err = other.Exec(ctx, `SET lock_timeout = '3s'`)
			require.NoError(t, err)
			_, err = other.Exec(ctx, `UPDATE leases SET holder = 'b' WHERE name = 'sweeper'`)
			require.NoError(t, err, "round %d: the ended transaction (backend %d) still holds the row", round, backend)
		}()
	}
}

// unwraps reports whether c (a *tls.Conn or the dialed conn) is built on sc.
func unwraps(c net.Conn, sc *stallConn) bool {
	type netConner interface{ NetConn() net.Conn }
	for c != nil {
		if c == net.Conn(sc) {
			return true
		}
		n, ok := c.(netConner)
		if !ok {
			return false
		}
		c = n.NetConn()
	}
	return false
}

// The grace lets a write finish; it does not keep a cancelled statement
// running: a long query whose context ends returns, with the context's
// error, and the database stops running it.
func TestAContextEndedMidQueryStillEndsTheQuery(t *testing.T) {
	pool := storetest.DB(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `SELECT pg_sleep(600)`)
		done <- err
	}()
	running := func() int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)' AND state = 'active' AND datname = current_database()`).Scan(&n))
		return n
	}
	testutil.WaitFor(t, 10*time.Second, "the query to run", func() bool { return running() == 1 })
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("a query whose context ended is still running after 30 s")
	}
	testutil.WaitFor(t, 10*time.Second, "the database to stop the query", func() bool { return running() == 0 })
}
