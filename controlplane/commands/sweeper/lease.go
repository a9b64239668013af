package sweeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/internal/store"
)

// Lease is one holder's claim on a named singleton in leader_leases, as
// River elects its leader: a term is elected when no unexpired lease exists,
// renewed only by the same holder and term before it expires, and trusted
// locally only until the attempt that won it plus the TTL minus a margin. An
// old leader that woke up late can neither renew nor delete a newer term.
type Lease struct {
	pool   *pgxpool.Pool
	name   string
	holder string
	ttl    time.Duration

	// lock guards term and trustUntil.
	lock       sync.Mutex
	term       string
	trustUntil time.Time
}

// NewLease returns a lease named name for holder with the given TTL.
func NewLease(pool *pgxpool.Pool, name, holder string, ttl time.Duration) *Lease {
	return &Lease{pool: pool, name: name, holder: holder, ttl: ttl}
}

// Term is the term held, "" when not leading.
func (l *Lease) Term() string {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.term
}

// Held reports whether the lease is held and still trusted at now.
func (l *Lease) Held(now time.Time) bool {
	l.lock.Lock()
	defer l.lock.Unlock()
	return l.term != "" && now.Before(l.trustUntil)
}

func (l *Lease) set(term string, trustUntil time.Time) {
	l.lock.Lock()
	defer l.lock.Unlock()
	l.term, l.trustUntil = term, trustUntil
}

// margin is how long before its expiry a leader stops trusting its term, so
// that clock drift between it and the database cannot make two leaders.
func (l *Lease) margin() time.Duration { return min(time.Second, l.ttl/5) }

// Elect tries to take the lease: expired leases are deleted, then the insert
// wins only when no lease remains. Both in one transaction.
func (l *Lease) Elect(ctx context.Context) (bool, error) {
	start := time.Now()
	term := newTerm()
	var got string
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM leader_leases WHERE name = $1 AND expires_at < now()`, l.name); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
			INSERT INTO leader_leases (name, holder, term, expires_at)
			VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
			ON CONFLICT (name) DO NOTHING RETURNING term`, l.name, l.holder, term, l.ttl.Microseconds()).Scan(&got)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("electing %s: %w", l.name, err)
	}
	l.set(got, start.Add(l.ttl-l.margin()))
	return true, nil
}

// renewSQL extends only this holder's own, unexpired term.
const renewSQL = `UPDATE leader_leases SET expires_at = now() + $4 * interval '1 microsecond'
	WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at >= now()`

// Renew extends the term on db (a transaction that sweeps under it, so the
// sweep commits only while the term holds). False means the term is lost:
// the caller steps down.
func (l *Lease) Renew(ctx context.Context, db store.DBTX) (bool, error) {
	term := l.Term()
	if term == "" {
		return false, nil
	}
	start := time.Now()
	tag, err := db.Exec(ctx, renewSQL, l.name, l.holder, term, l.ttl.Microseconds())
	if err != nil {
		return false, fmt.Errorf("renewing %s: %w", l.name, err)
	}
	if tag.RowsAffected() == 0 {
		l.StepDown()
		return false, nil
	}
	l.set(term, start.Add(l.ttl-l.margin()))
	return true, nil
}

// StepDown forgets the term locally (it expires in the database by itself).
func (l *Lease) StepDown() { l.set("", time.Time{}) }

// Resign deletes this term's lease, so another replica takes over at once
// rather than after the TTL.
func (l *Lease) Resign(ctx context.Context) error {
	term := l.Term()
	if term == "" {
		return nil
	}
	l.StepDown()
	if _, err := l.pool.Exec(ctx, `DELETE FROM leader_leases WHERE name = $1 AND holder = $2 AND term = $3`, l.name, l.holder, term); err != nil {
		return fmt.Errorf("resigning %s: %w", l.name, err)
	}
	return nil
}

func newTerm() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
