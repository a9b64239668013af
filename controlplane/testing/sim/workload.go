package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/queue"
)

// Target is the control plane the workload enqueues into.
type Target struct {
	Pool     *pgxpool.Pool
	Queue    *queue.Queue
	TenantID string
	Fleet    *Fleet
	// Mark, when set, is told when the steady workload starts
	// ("steady-started") and ends ("steady-finished"), when a fan-out
	// committed ("fanout-committed") and when it settled
	// ("fanout-settled"): a caller measuring what happens in between
	// (bc-sim --marks, BenchmarkSessions) acts on the event itself.
	Mark func(name string)
}

func (t Target) mark(name string) {
	if t.Mark != nil {
		t.Mark(name)
	}
}

// Latency summarises a set of durations.
type Latency struct {
	Count int           `json:"count"`
	P50   time.Duration `json:"p50Ns"`
	P99   time.Duration `json:"p99Ns"`
	Max   time.Duration `json:"maxNs"`
}

// Summarise sorts a copy of d and reads its percentiles.
func Summarise(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return Latency{Count: len(s), P50: s[len(s)*50/100], P99: s[min(len(s)-1, len(s)*99/100)], Max: s[len(s)-1]}
}

// SteadyOptions shape the steady workload.
type SteadyOptions struct {
	// Commands is how many commands to send in all (0: until Duration).
	Commands int
	// Duration bounds the run (0: until Commands).
	Duration time.Duration
	// Concurrency is how many enqueuers run at once, each waiting for its
	// command to reach the node before the next (default 1).
	Concurrency int
	// ReceiptTimeout bounds the wait for one command to reach its node
	// (default 30s); a command past it counts as lost.
	ReceiptTimeout time.Duration
}

// SteadyResult is what the steady workload measured.
type SteadyResult struct {
	// Dispatch is the latency from COMMIT being sent to the node receiving
	// the command: it includes the commit itself.
	Dispatch Latency `json:"dispatch"`
	// Enqueue is the latency of the enqueue transaction (begin to commit).
	Enqueue Latency `json:"enqueue"`
	// Lost counts commands that did not reach their node in time.
	Lost int `json:"lost"`
	// Elapsed is the whole run.
	Elapsed time.Duration `json:"elapsedNs"`
}

// Steady sends one command at a time per enqueuer, each to a random node,
// and measures the time from its commit to its node receiving it.
func Steady(ctx context.Context, t Target, o SteadyOptions) (SteadyResult, error) {
	if o.Commands <= 0 && o.Duration <= 0 {
		return SteadyResult{}, errors.New("steady: give a number of commands or a duration")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.ReceiptTimeout <= 0 {
		o.ReceiptTimeout = 30 * time.Second
	}
	runCtx := ctx
	if o.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	var (
		mu       sync.Mutex
		dispatch []time.Duration
		enqueue  []time.Duration
		lost     int
		firstErr error
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	nodes := t.Fleet.Daemons
	t.mark("steady-started")
	defer t.mark("steady-finished")
	start := time.Now()
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				i := next.Add(1)
				if o.Commands > 0 && i > int64(o.Commands) {
					return
				}
				node := nodes[rand.IntN(len(nodes))].NodeID
				d, e, err := sendOne(runCtx, t, node, "steady-"+strconv.FormatInt(i, 10)+"-"+strconv.FormatInt(start.UnixNano(), 36), o.ReceiptTimeout)
				mu.Lock()
				switch {
				case errors.Is(err, errLost):
					lost++
				case err != nil && runCtx.Err() == nil && firstErr == nil:
					firstErr = err
				case err == nil:
					dispatch = append(dispatch, d)
					enqueue = append(enqueue, e)
				}
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return SteadyResult{}, firstErr
	}
	return SteadyResult{Dispatch: Summarise(dispatch), Enqueue: Summarise(enqueue), Lost: lost, Elapsed: time.Since(start)}, nil
}

var errLost = errors.New("command did not reach its node in time")

// sendOne enqueues one command in its own transaction and waits for its
// node to receive it: dispatch is from COMMIT sent to receipt.
func sendOne(ctx context.Context, t Target, nodeID, key string, timeout time.Duration) (dispatch, enqueue time.Duration, err error) {
	t0 := time.Now()
	tx, err := t.Pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	cmd, _, err := t.Queue.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: t.TenantID, NodeID: nodeID, Kind: Kind.Kind, IdempotencyKey: key})
	if err != nil {
		return 0, 0, err
	}
	got := t.Fleet.Expect(cmd.ID)
	tc := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fleet.Forget(cmd.ID)
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	enqueue = time.Since(t0)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case at := <-got:
		return at.Sub(tc), enqueue, nil
	case <-timer.C:
		t.Fleet.Forget(cmd.ID)
		return 0, enqueue, errLost
	case <-ctx.Done():
		t.Fleet.Forget(cmd.ID)
		return 0, enqueue, ctx.Err()
	}
}

// FanoutResult is what one fan-out measured.
type FanoutResult struct {
	// Nodes is how many nodes got the command.
	Nodes int `json:"nodes"`
	// Enqueue is how long enqueueing one command per node in one
	// transaction took, commit included.
	Enqueue time.Duration `json:"enqueueNs"`
	// Received is from COMMIT sent to the last node receiving its command.
	Received time.Duration `json:"receivedNs"`
	// Receipt summarises the per-node time from COMMIT to receipt.
	Receipt Latency `json:"receipt"`
	// Settled is from COMMIT sent to the gateway acknowledging the last
	// node's terminal report, which it does once the report is stored:
	// every command terminal in the database (checked there after).
	Settled time.Duration `json:"settledNs"`
	// Succeeded counts the commands that settled as succeeded.
	Succeeded int `json:"succeeded"`
}

// Fanout enqueues one command to every node of the fleet in one transaction,
// commits, and waits until every node received its command and every
// command is terminal, bounded by timeout.
func Fanout(ctx context.Context, t Target, timeout time.Duration) (FanoutResult, error) {
	nodes := t.Fleet.Daemons
	key := "fanout-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t0 := time.Now()
	tx, err := t.Pool.Begin(ctx)
	if err != nil {
		return FanoutResult{}, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ids := make([]string, 0, len(nodes))
	waits := make([]<-chan time.Time, 0, len(nodes))
	settles := make([]<-chan time.Time, 0, len(nodes))
	for _, d := range nodes {
		cmd, _, err := t.Queue.Enqueue(ctx, tx, queue.EnqueueParams{TenantID: t.TenantID, NodeID: d.NodeID, Kind: Kind.Kind, IdempotencyKey: key})
		if err != nil {
			return FanoutResult{}, err
		}
		ids = append(ids, cmd.ID)
		waits = append(waits, t.Fleet.Expect(cmd.ID))
		settles = append(settles, t.Fleet.ExpectSettled(cmd.ID))
	}
	tc := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return FanoutResult{}, fmt.Errorf("commit: %w", err)
	}
	res := FanoutResult{Nodes: len(nodes), Enqueue: time.Since(t0)}
	t.mark("fanout-committed")
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	receipts := make([]time.Duration, 0, len(nodes))
	for i, ch := range waits {
		select {
		case at := <-ch:
			receipts = append(receipts, at.Sub(tc))
		case <-wctx.Done():
			for _, id := range ids[i:] {
				t.Fleet.Forget(id)
			}
			return res, fmt.Errorf("fan-out: %d of %d nodes received their command within %s", len(receipts), len(nodes), timeout)
		}
	}
	res.Receipt = Summarise(receipts)
	res.Received = res.Receipt.Max
	// Settling is timed by the gateway's acknowledgements of the terminal
	// updates, which it sends once the transaction that stored them
	// committed, so the fan-out costs the database nothing to watch (it
	// used to be asked every 10 ms whether any command was still open: at
	// 10,000 nodes each read took milliseconds of its CPU, taken from the
	// settles it measures). One read at the end checks, where the spec's
	// states live, that every command is terminal.
	for i, ch := range settles {
		select {
		case at := <-ch:
			res.Settled = max(res.Settled, at.Sub(tc))
		case <-wctx.Done():
			for _, id := range ids[i:] {
				t.Fleet.Forget(id)
			}
			// Once, for the error: how many of the fan-out's are still open.
			var open int
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := t.Pool.QueryRow(cctx, `SELECT count(*) FROM commands WHERE id = ANY($1)
				AND state IN ('pending', 'dispatched', 'acked', 'running')`, ids).Scan(&open); err != nil {
				return res, fmt.Errorf("fan-out: commands still open after %s (counting them: %w)", timeout, err)
			}
			return res, fmt.Errorf("fan-out: %d of %d commands still open after %s", open, len(ids), timeout)
		}
	}
	t.mark("fanout-settled")
	var terminal, succeeded int
	err = t.Pool.QueryRow(wctx, `SELECT count(*) FILTER (WHERE state IN ('succeeded','failed','rejected','expired','cancelled')),
		count(*) FILTER (WHERE state = 'succeeded') FROM commands WHERE id = ANY($1)`, ids).Scan(&terminal, &succeeded)
	if err != nil {
		return res, fmt.Errorf("fan-out: counting settled commands: %w", err)
	}
	if terminal != len(ids) {
		return res, fmt.Errorf("fan-out: every node's terminal report was acknowledged, yet only %d of %d commands are terminal", terminal, len(ids))
	}
	res.Succeeded = succeeded
	return res, nil
}
