package trustbundle

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// Source hands the gateway and the join endpoint the newest published
// bundle, read from the database at most once per TTL (a new version
// reaches sessions that start after it within the TTL; open sessions get it
// at their next Welcome).
type Source struct {
	pool *pgxpool.Pool
	ttl  time.Duration

	// lock guards the cached bundle and when it was read.
	lock   sync.Mutex
	cached *agentv1.TrustBundle
	read   time.Time
}

// NewSource reads from pool, caching for ttl (5s when zero).
func NewSource(pool *pgxpool.Pool, ttl time.Duration) *Source {
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	return &Source{pool: pool, ttl: ttl}
}

// Current is the newest bundle, nil when none was published. A read that
// fails returns the last one read with the error, so a database blip does
// not send a Welcome without the bundle nodes hold.
func (s *Source) Current(ctx context.Context) (*agentv1.TrustBundle, error) {
	s.lock.Lock()
	defer s.lock.Unlock()
	if !s.read.IsZero() && time.Since(s.read) < s.ttl {
		return s.cached, nil
	}
	tb, err := Latest(ctx, s.pool)
	if err != nil {
		return s.cached, err
	}
	s.cached, s.read = tb, time.Now()
	return tb, nil
}

// Invalidate makes the next Current read the database (after a publish).
func (s *Source) Invalidate() {
	s.lock.Lock()
	s.read = time.Time{}
	s.lock.Unlock()
}
