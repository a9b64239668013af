package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// lister reads sessions' open commands together: a session that wants its
// node's open commands while other sessions' reads are in flight waits with
// the others that arrive meanwhile, and their reads go out as one statement
// (queue.ListOpenMany). A fan-out that wakes 10,000 sessions at once, or
// 30,000 idle sessions' fallback polls, then costs tens of statements a
// second rather than thousands. A lone read goes out at once.
type lister struct {
	pool    *pgxpool.Pool
	queue   *queue.Queue
	workers int
	max     int

	// spill starts a read beside the one in flight once that one has run
	// this long: a read held up (a slow database, a failover) holds no
	// session's read for longer.
	spill time.Duration

	// lock guards waiting, busy and began.
	lock    sync.Mutex
	waiting []*listRequest
	busy    int
	// began is when the newest read in flight was sent.
	began time.Time
}

type listRequest struct {
	nodeID string
	done   chan listResult // buffered: a worker never blocks on a session gone
}

type listResult struct {
	open []queue.Command
	err  error
}

func newLister(pool *pgxpool.Pool, q *queue.Queue) *lister {
	return &lister{pool: pool, queue: q, workers: 4, max: 512, spill: 10 * time.Millisecond}
}

// listOpen returns nodeID's open commands in seq order, read in a
// statement shared with other sessions' reads.
func (l *lister) listOpen(ctx context.Context, nodeID string) ([]queue.Command, error) {
	r := &listRequest{nodeID: nodeID, done: make(chan listResult, 1)}
	l.lock.Lock()
	l.waiting = append(l.waiting, r)
	// One read in flight gathers the next: the sessions a fan-out wakes
	// arrive over the tens of milliseconds the listener takes to hand out
	// their NOTIFYs, and a read started for each of the first few left the
	// rest to reads of three or four nodes (pg_stat_statements: 8,928
	// reads for 30,300 wake-ups). Another read starts beside it only once
	// a whole read's worth waits, or the one in flight has run for spill.
	if l.busy == 0 || (l.busy < l.workers && (len(l.waiting) >= l.max || time.Since(l.began) >= l.spill)) {
		l.busy++
		go l.work()
	}
	l.lock.Unlock()
	select {
	case res := <-r.done:
		return res.open, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *lister) work() {
	for {
		l.lock.Lock()
		n := min(len(l.waiting), l.max)
		if n == 0 {
			l.busy--
			l.lock.Unlock()
			return
		}
		batch := make([]*listRequest, n)
		copy(batch, l.waiting)
		rest := copy(l.waiting, l.waiting[n:])
		clear(l.waiting[rest:])
		l.waiting = l.waiting[:rest]
		l.began = time.Now()
		l.lock.Unlock()
		l.read(batch)
	}
}

func (l *lister) read(batch []*listRequest) {
	// ListOpenMany reads a node named twice (two sessions of it) once.
	ids := make([]string, len(batch))
	for i, r := range batch {
		ids[i] = r.nodeID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open, err := l.queue.ListOpenMany(ctx, l.pool, ids)
	handed := make(map[string]bool, len(batch))
	for _, r := range batch {
		if err != nil {
			r.done <- listResult{err: err}
			continue
		}
		// Each session owns what it gets: two sessions of one node (a
		// reconnect, a stale one about to be fenced) must not share it,
		// so a node's second reader in a batch gets a copy.
		cmds := open[r.nodeID]
		if handed[r.nodeID] {
			cmds = slices.Clone(cmds)
		}
		handed[r.nodeID] = true
		r.done <- listResult{open: cmds}
	}
}
