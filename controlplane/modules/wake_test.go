package modules_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/commands/wakes"
	"github.com/better-compute/commands/controlplane/modules"
)

// The subprocess that plays the control plane killed with kill -9: the test
// binary re-executed with helperEnv set to the mode.
const (
	helperEnv   = "BC_MODULES_WAKE_HELPER"
	helperDB    = "BC_MODULES_WAKE_DB"
	helperCmd   = "BC_MODULES_WAKE_CMD"
	modeSettle  = "settle"      // settle, then wait to be killed before any waker runs
	modeWaking  = "settle-wake" // settle with the wakers running, wait to be killed inside the waker
	markSettled = "SETTLED"
	markWaking  = "WAKER-RAN"
)

// wfModule owns the keys wf:<prefix>… and hands each wake to fn.
type wfModule struct {
	prefix string
	fn     func(ctx context.Context, w wakes.Wake) error
}

func (m wfModule) Name() string                                 { return "wf" }
func (m wfModule) Prefixes() []string                           { return []string{"wf:" + m.prefix} }
func (m wfModule) Wake(ctx context.Context, w wakes.Wake) error { return m.fn(ctx, w) }

// settleHelper is the killed control plane: it loads the module, settles
// the command through the queue (the gateway's path: Transition on the
// pool), says so on stdout, and waits for SIGKILL.
func settleHelper() int {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ConnConfig.Database = os.Getenv(helperDB)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	reg, _ := kinds.NewRegistry(stepKind)
	q := queue.New(reg, hclog.NewNullLogger())
	mode := os.Getenv(helperEnv)
	h, err := modules.NewHost(pool, q, reg, modules.HostOptions{}, wfModule{prefix: "kill-", fn: func(ctx context.Context, w wakes.Wake) error {
		fmt.Printf("%s %s\n", markWaking, w.CommandID)
		<-ctx.Done() // the waker never finishes: the process dies inside it
		return ctx.Err()
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if mode == modeWaking {
		go func() { _ = h.Run(ctx) }()
	}
	if _, _, err := q.Transition(ctx, pool, queue.Transition{CommandID: os.Getenv(helperCmd), To: queue.Succeeded}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println(markSettled)
	select {}
}

// "Owner wakes are durable: the transaction that settles a command ... also
// records a wake for the owner named by its key, delivered at least once to
// that module's registered waker, even across a control plane restart".
// The control plane is a real process killed with SIGKILL: once right after
// the settle committed, before any waker ran; once inside the waker. A new
// control plane on the same database delivers the wake to its waker.
func TestWakeSurvivesKill9BetweenSettleAndWaker(t *testing.T) {
	for _, mode := range []string{modeSettle, modeWaking} {
		t.Run(mode, func(t *testing.T) {
			b := setup(t)
			key := modules.StepKey("kill-1", "reset", 1)
			var cmd queue.Command
			require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				var err error
				cmd, _, err = b.q.Enqueue(b.ctx, tx, b.step(key))
				return err
			}))

			proc := exec.Command(os.Args[0], "-test.run=^$")
			proc.Env = append(os.Environ(), helperEnv+"="+mode, helperDB+"="+b.dbName, helperCmd+"="+cmd.ID)
			proc.Stderr = os.Stderr
			out, err := proc.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, proc.Start())
			want := markSettled
			if mode == modeWaking {
				want = markWaking + " " + cmd.ID
			}
			waitLine(t, out, want)
			require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
			_ = proc.Wait()

			got, err := b.q.Get(b.ctx, b.pool, b.node, cmd.ID)
			require.NoError(t, err)
			require.Equal(t, queue.Succeeded, got.State, "the settle committed before the kill")
			var jobs int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'commandId' = $2 AND state <> 'completed'`,
				wakes.JobKind, cmd.ID).Scan(&jobs))
			require.Equal(t, 1, jobs, "the settle's transaction recorded the wake")

			// The restarted control plane.
			woken := make(chan wakes.Wake, 4)
			h, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{Wakes: wakes.Options{
				JobTimeout: time.Second, RescueAfter: 2 * time.Second, FetchPollInterval: 200 * time.Millisecond,
			}}, wfModule{prefix: "kill-", fn: func(_ context.Context, w wakes.Wake) error {
				woken <- w
				return nil
			}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- h.Run(ctx) }()
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()
			select {
			case w := <-woken:
				require.Equal(t, cmd.ID, w.CommandID)
				require.Equal(t, "wf:kill-1", w.Owner, "wf:<workflowId>:… wakes that workflow")
				require.Equal(t, key, w.Key)
				require.Equal(t, string(queue.Succeeded), w.State)
				require.Equal(t, b.node, w.NodeID)
				if mode == modeWaking {
					require.GreaterOrEqual(t, w.Attempt, 2, "the killed run was the first delivery")
				}
			case <-time.After(90 * time.Second):
				t.Fatal("the wake recorded before the kill never reached the restarted control plane's waker")
			}
		})
	}
}

func waitLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	lines := make(chan string)
	var once sync.Once
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
		}
		once.Do(func() { close(lines) })
	}()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the helper exited before printing %q", want)
			}
			if strings.TrimSpace(l) == want {
				return
			}
		case <-deadline:
			t.Fatalf("the helper did not print %q within 60s", want)
		}
	}
}

// A settle rolled back takes its wake with it; a settle hook that fails
// rolls the settle back (the wake is never lost while the settle lands);
// an API caller's key records no wake.
func TestWakeCommitsExactlyWithTheSettle(t *testing.T) {
	b := setup(t)
	_, err := modules.NewHost(b.pool, b.q, b.reg, modules.HostOptions{}, wfModule{prefix: "tx-", fn: func(context.Context, wakes.Wake) error { return nil }})
	require.NoError(t, err)
	enq := func(key string) queue.Command {
		var c queue.Command
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			c, _, err = b.q.Enqueue(b.ctx, tx, b.step(key))
			return err
		}))
		return c
	}
	jobsFor := func(id string) int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE args->>'commandId' = $1`, id).Scan(&n))
		return n
	}
	c := enq(modules.StepKey("tx-1", "s", 1))
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, changed, err := b.q.Transition(b.ctx, tx, queue.Transition{CommandID: c.ID, To: queue.Failed, Reason: "timeout"})
	require.NoError(t, err)
	require.True(t, changed)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Zero(t, jobsFor(c.ID))

	settle(t, b.ctx, b.q, b.pool, c.ID)
	require.Equal(t, 1, jobsFor(c.ID))

	api := enq(queue.APIKey(b.tenant, "ops", "k1"))
	settle(t, b.ctx, b.q, b.pool, api.ID)
	require.Zero(t, jobsFor(api.ID), "api:… keys own no wakes")

	// The sweeper's path: an expired pending command wakes its owner too.
	p := b.step(modules.StepKey("tx-2", "s", 1))
	p.NotAfter = time.Now().Add(-time.Second)
	expired := func() queue.Command {
		var c queue.Command
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			c, _, err = b.q.Enqueue(b.ctx, tx, p)
			return err
		}))
		return c
	}()
	ex, _, err := b.q.Sweep(b.ctx, b.pool, 100)
	require.NoError(t, err)
	require.NotEmpty(t, ex)
	require.Equal(t, 1, jobsFor(expired.ID))

	// A hook that fails rolls the settle back.
	b.q.OnSettle(func(context.Context, pgx.Tx, []queue.Command) error { return fmt.Errorf("boom") })
	c2 := enq(modules.StepKey("tx-3", "s", 1))
	_, _, err = b.q.Transition(b.ctx, b.pool, queue.Transition{CommandID: c2.ID, To: queue.Succeeded})
	require.ErrorContains(t, err, "boom")
	cur, err := b.q.Get(b.ctx, b.pool, b.node, c2.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Pending, cur.State)
}
