package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// setup is a database with a table of its own: a CHECK that a caller's bad
// row violates, and a deferred unique key that fails only at COMMIT.
func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	t.Parallel()
	pool := storetest.DB(t)
	_, err := pool.Exec(context.Background(), `CREATE TABLE gc_rows (
		id text PRIMARY KEY,
		n int NOT NULL CHECK (n >= 0),
		k text UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	return pool
}

func insert(id string, n int, k any) Func {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO gc_rows (id, n, k) VALUES ($1, $2, $3)`, id, n, k)
		return err
	}
}

func stored(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM gc_rows WHERE id = $1)`, id).Scan(&ok))
	return ok
}

// blocked is a Committer with one worker held inside its first group until
// release is closed, and a wait for n callers queued behind it: the next
// group then holds all of them, deterministically.
type blocked struct {
	c       *Committer
	once    sync.Once
	release chan struct{}
	sizes   chan int
	first   chan error
}

func newBlocked(t *testing.T, pool *pgxpool.Pool) *blocked {
	t.Helper()
	return newBlockedWith(t, pool, Options{})
}

// newBlockedWith is newBlocked with opts (Observe is the test's; Workers
// is 1 unless opts sets it).
func newBlockedWith(t *testing.T, pool *pgxpool.Pool, opts Options) *blocked {
	t.Helper()
	b := &blocked{release: make(chan struct{}), sizes: make(chan int, 16), first: make(chan error, 1)}
	opts.Observe = func(n int) { b.sizes <- n }
	if opts.Workers == 0 {
		opts.Workers = 1
	}
	// A test that fails while the first group is held still lets it end,
	// so that the database's cleanup does not wait on its connection.
	t.Cleanup(b.unblock)
	b.c = New(pool, opts)
	inside := make(chan struct{})
	go func() {
		b.first <- b.c.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
			close(inside)
			<-b.release
			return insert("first", 1, nil)(ctx, tx)
		})
	}()
	<-inside
	return b
}

// unblock lets the held group go on.
func (b *blocked) unblock() { b.once.Do(func() { close(b.release) }) }

func (b *blocked) waitQueued(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b.c.lock.Lock()
		defer b.c.lock.Unlock()
		return len(b.c.waiting) == n
	}, 10*time.Second, time.Millisecond, "callers queued behind the busy worker")
}

// Many callers share one transaction, and each is answered only once it
// committed: when Do returns nil the caller's row is visible to another
// connection, and before the group commits no caller has been answered.
func TestCallersShareOneCommitAndAreAnsweredAfterIt(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	const n = 20
	answered := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("r%d", i)
			if err := b.c.Do(context.Background(), insert(id, i, nil)); err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			// Acknowledged: it must already be stored, seen from elsewhere.
			if !stored(t, pool, id) {
				t.Errorf("caller %d answered before its row was committed", i)
			}
			answered <- i
		}()
	}
	b.waitQueued(t, n)
	require.Empty(t, answered, "no caller is answered while its group has not run")
	b.unblock()
	require.NoError(t, <-b.first)
	wg.Wait()
	require.Len(t, answered, n)
	require.Equal(t, 1, <-b.sizes, "the first group held only the first caller")
	require.Equal(t, n, <-b.sizes, "every queued caller went out in one transaction")
}

// "A caller whose own insert fails gets its own error, not the group's":
// one caller's row violates a CHECK; it gets that violation, nothing of it
// is stored, and every other caller of its group is stored and answered nil.
// A caller whose function fails after its statements succeeded leaves
// nothing behind either.
func TestAFailingCallerGetsItsOwnErrorAndTheRestCommit(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	const n = 10
	errs := make([]error, n)
	goErr := errors.New("refused after its insert")
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn := insert(fmt.Sprintf("r%d", i), i, nil)
			switch i {
			case 3:
				fn = insert("r3", -1, nil) // violates the CHECK
			case 7:
				fn = func(ctx context.Context, tx pgx.Tx) error {
					if err := insert("r7", 7, nil)(ctx, tx); err != nil {
						return err
					}
					return goErr
				}
			}
			errs[i] = b.c.Do(context.Background(), fn)
		}()
	}
	b.waitQueued(t, n)
	b.unblock()
	require.NoError(t, <-b.first)
	wg.Wait()
	var pe *pgconn.PgError
	require.ErrorAs(t, errs[3], &pe)
	require.Equal(t, "23514", pe.Code, "its own check violation")
	require.ErrorIs(t, errs[7], goErr)
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		if i == 3 || i == 7 {
			require.False(t, stored(t, pool, id), "nothing of failing caller %d is stored", i)
			continue
		}
		require.NoError(t, errs[i], "caller %d", i)
		require.True(t, stored(t, pool, id), "caller %d", i)
	}
}

// A group whose COMMIT fails acknowledges no one: two callers whose rows
// collide on a key checked only at commit both get the commit's error, and
// neither row is stored.
func TestAFailedCommitAcknowledgesNoCaller(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.c.Do(context.Background(), insert(fmt.Sprintf("r%d", i), i, "same"))
		}()
	}
	b.waitQueued(t, 2)
	b.unblock()
	require.NoError(t, <-b.first)
	wg.Wait()
	for i, err := range errs {
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, "caller %d", i)
		require.Equal(t, "23505", pe.Code)
		require.False(t, stored(t, pool, fmt.Sprintf("r%d", i)))
	}
}

// A group whose connection dies under it loses no one: every caller runs
// again alone; the one that kills its own connection gets that error, the
// others are stored and answered nil.
func TestALostConnectionRunsEachCallerAlone(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn := insert(fmt.Sprintf("r%d", i), i, nil)
			if i == 2 {
				fn = func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
					return err
				}
			}
			errs[i] = b.c.Do(context.Background(), fn)
		}()
	}
	b.waitQueued(t, n)
	b.unblock()
	require.NoError(t, <-b.first)
	wg.Wait()
	require.Error(t, errs[2])
	for i := range n {
		if i == 2 {
			continue
		}
		require.NoError(t, errs[i], "caller %d", i)
		require.True(t, stored(t, pool, fmt.Sprintf("r%d", i)), "caller %d", i)
	}
}

// A caller that gives up while it waits is answered with its context's
// error at once, and one that gave up before its group began stores
// nothing.
func TestACallerThatGivesUpIsNotStoredBeforeItsGroup(t *testing.T) {
	pool := setup(t)
	b := newBlocked(t, pool)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.c.Do(ctx, insert("gone", 1, nil)) }()
	b.waitQueued(t, 1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	b.unblock()
	require.NoError(t, <-b.first)
	// The worker skipped it: the committer is idle again and stored nothing of it.
	require.NoError(t, b.c.Do(context.Background(), insert("after", 1, nil)))
	require.False(t, stored(t, pool, "gone"))
}

// Spill: callers that arrive while a group is in flight wait for it and go
// out together as the next group, though a second worker is free, as long
// as the group in flight has not run for Spill.
func TestWithSpillCallersWaitForTheGroupInFlight(t *testing.T) {
	pool := setup(t)
	b := newBlockedWith(t, pool, Options{Workers: 2, Spill: time.Hour})
	const n = 5
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- b.c.Do(context.Background(), insert(fmt.Sprintf("w%d", i), i, nil)) }()
	}
	b.waitQueued(t, n)
	b.c.lock.Lock()
	workers := b.c.workers
	b.c.lock.Unlock()
	require.Equal(t, 1, workers, "no second group while the first has run less than Spill")
	b.unblock()
	require.NoError(t, <-b.first)
	for range n {
		require.NoError(t, <-errs)
	}
	require.Equal(t, 1, <-b.sizes)
	require.Equal(t, n, <-b.sizes, "the callers that waited went out as one group")
}

// Spill: a group held up (here, inside its caller's function) holds the
// callers behind it for Spill, not for as long as it is held: then a group
// starts beside it and commits, while the first is still held.
func TestWithSpillAHeldUpGroupDoesNotHoldTheNextForLongerThanSpill(t *testing.T) {
	pool := setup(t)
	b := newBlockedWith(t, pool, Options{Workers: 2, Spill: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.c.Do(ctx, insert("next", 1, nil)), "committed beside the held group")
	require.True(t, stored(t, pool, "next"))
	select {
	case err := <-b.first:
		t.Fatalf("the held group ended first: %v", err)
	default:
	}
	b.unblock()
	require.NoError(t, <-b.first)
	// The worker started beside it ends once nothing is held up.
	require.Eventually(t, func() bool {
		b.c.lock.Lock()
		defer b.c.lock.Unlock()
		return b.c.workers == 0
	}, 10*time.Second, time.Millisecond, "every worker ends once nothing waits")
}

// Spill: a group that began while every worker was busy is timed too. Here
// the second group starts beside the held first one and is itself held;
// the first then ends and its worker leaves (the second has not yet run
// for Spill), so the second's own timer is what starts a group for the
// caller waiting behind it, which commits while the second is still held.
func TestWithSpillAGroupBegunWithEveryWorkerBusyIsTimedToo(t *testing.T) {
	pool := setup(t)
	const spill = 300 * time.Millisecond
	b := newBlockedWith(t, pool, Options{Workers: 2, Spill: spill})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	second, releaseSecond := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letSecondGo := func() { releaseOnce.Do(func() { close(releaseSecond) }) }
	t.Cleanup(letSecondGo)
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- b.c.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			close(second)
			<-releaseSecond
			return insert("second", 2, nil)(ctx, tx)
		})
	}()
	<-second // begun beside the first, once that one had run for Spill
	b.c.lock.Lock()
	inFlight := len(b.c.running)
	b.c.lock.Unlock()
	require.Equal(t, 2, inFlight, "each group in flight is timed on its own")
	thirdDone := make(chan error, 1)
	go func() { thirdDone <- b.c.Do(ctx, insert("third", 3, nil)) }()
	b.waitQueued(t, 1)
	began := time.Now()
	b.unblock()
	require.NoError(t, <-b.first)
	select {
	case err := <-thirdDone:
		require.NoError(t, err, "committed beside the held second group")
	case <-ctx.Done():
		t.Fatal("the caller behind the held second group waited for as long as it was held")
	}
	if time.Since(began) >= spill {
		// Too slow a machine to tell the two apart: the first's worker
		// saw the second held and took the third itself.
		t.Logf("the first group's worker may have taken the third caller (%v after the unblock)", time.Since(began))
	}
	require.True(t, stored(t, pool, "third"))
	require.False(t, stored(t, pool, "second"), "the second group is still held")
	letSecondGo()
	require.NoError(t, <-secondDone)
}
