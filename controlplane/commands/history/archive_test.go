package history_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/history"
	"github.com/better-compute/commands/controlplane/commands/history/archive"
)

// Settled commands, their events and River's finished jobs past 90 days are
// archived, one object per tenant and hour with a manifest, then deleted;
// what is open, held or recent stays; and the archive finds a command by
// id, node, kind and requester once its row is gone.
func TestArchiveThenDelete(t *testing.T) {
	b := setup(t)
	b.seed(t)
	st, err := b.archiver(history.Policy{Days: 90}).Pass(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 4, st.Commands, "cmd_a, cmd_b, cmd_c and cmd_t2")
	require.Equal(t, 1, st.Jobs)
	require.Equal(t, 1, st.Held, "cmd_held, in a batch still awaiting approval")
	require.Equal(t, []string{"cmd_held", "cmd_open", "cmd_recent"}, b.ids(t))
	require.Zero(t, b.count(t, `SELECT count(*) FROM outbox WHERE payload->>'commandId' IN ('cmd_a', 'cmd_b', 'cmd_c', 'cmd_t2')`))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM outbox`), "the recent command's two events: events go by their own age")
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))

	m, err := archive.ReadManifest(b.ctx, b.store, "t1")
	require.NoError(t, err)
	require.Len(t, m.Objects, 2, "t1's two hours")
	require.Equal(t, archive.ObjectKey("t1", base), m.Objects[0].Key)
	require.Equal(t, 2, m.Objects[0].Commands)
	require.Len(t, m.Objects[0].SHA256, 64)
	fleet, err := archive.ReadManifest(b.ctx, b.store, "")
	require.NoError(t, err)
	require.Len(t, fleet.Objects, 1)
	require.Equal(t, 1, fleet.Objects[0].Jobs)

	src := archive.DirSource(b.root)
	for name, q := range map[string]archive.Query{
		"id": {Tenant: "t1", ID: "cmd_b"}, "node": {Tenant: "t1", Node: "n2"},
		"kind": {Tenant: "t1", Kind: "node.reboot"}, "requester": {Tenant: "t1", Requester: "bob", Kind: "node.reboot"},
	} {
		found, err := archive.Search(b.ctx, src, q)
		require.NoError(t, err, name)
		require.Len(t, found, 1, name)
		var c archive.CommandRow
		require.NoError(t, json.Unmarshal(found[0].Command, &c))
		require.Equal(t, "cmd_b", c.ID, name)
		require.Equal(t, "failed", c.State)
		require.Equal(t, "exit-code", c.Reason)
		require.Equal(t, "done", c.Message)
		require.Len(t, found[0].Events, 2, "%s: queued and settled", name)
	}
	found, err := archive.Search(b.ctx, src, archive.Query{Tenant: "t1", Requester: "bob"})
	require.NoError(t, err)
	require.Len(t, found, 2, "cmd_b and cmd_c, across two objects")

	var out bytes.Buffer
	n, err := archive.Export(b.ctx, src, archive.Query{Tenant: "t1"}, &out)
	require.NoError(t, err)
	require.Equal(t, 3+9, n, "three commands; the events of the 100-day-old hours, the held and open commands' too")

	// A second pass finds nothing to do and rewrites nothing.
	before := b.object(t, m.Objects[0].Key)
	st, err = b.archiver(history.Policy{Days: 90}).Pass(b.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Rows())
	require.Equal(t, before, b.object(t, m.Objects[0].Key))
}

// A command held by an open batch stays until the batch closes, then joins
// its hour's object beside the rows archived before, none twice.
func TestHeldCommandJoinsItsHourLater(t *testing.T) {
	b := setup(t)
	b.seed(t)
	a := b.archiver(history.Policy{Days: 90})
	_, err := a.Pass(b.ctx)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE command_batches SET state = 'recorded' WHERE id = 'batch_open'`)
	require.NoError(t, err)
	st, err := a.Pass(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Commands)
	require.Equal(t, []string{"cmd_open", "cmd_recent"}, b.ids(t))
	m, err := archive.ReadManifest(b.ctx, b.store, "t1")
	require.NoError(t, err)
	require.Equal(t, 3, m.Objects[0].Commands, "cmd_a, cmd_b and now cmd_held")
	require.Equal(t, 7, m.Objects[0].Events, "unchanged: cmd_held's events were archived by their age")
	found, err := archive.Search(b.ctx, archive.DirSource(b.root), archive.Query{Tenant: "t1", ID: "cmd_held"})
	require.NoError(t, err)
	require.Len(t, found, 1)
}

// A tenant's override wins over the default; 0 keeps its history.
func TestTenantOverride(t *testing.T) {
	b := setup(t)
	b.seed(t)
	_, err := b.archiver(history.Policy{Days: 90, Tenants: map[string]int{"t1": 0, "t2": 30}}).Pass(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM commands WHERE tenant_id = 't2'`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM commands WHERE tenant_id = 't1'`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`), "the fleet's rows follow the default")
}

// A process that stops after writing the object, after the manifest, or
// after the first delete batch loses nothing and duplicates nothing: the
// rerun writes the same object, byte for byte, and deletes the rest.
func TestCrashBetweenSteps(t *testing.T) {
	killed := errors.New("killed")
	for _, step := range []string{"object", "manifest", "delete"} {
		t.Run(step, func(t *testing.T) {
			b := setup(t)
			b.seed(t)
			a := b.archiver(history.Policy{Days: 90})
			a.SetCrash(func(s string) error {
				if s == step {
					return killed
				}
				return nil
			})
			_, err := a.Pass(b.ctx)
			require.ErrorIs(t, err, killed)
			require.Contains(t, b.ids(t), "cmd_c", "the later hour was not reached")
			key := archive.ObjectKey("t1", base)
			want := b.object(t, key)
			_, err = b.archiver(history.Policy{Days: 90}).Pass(b.ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"cmd_held", "cmd_open", "cmd_recent"}, b.ids(t))
			require.Equal(t, want, b.object(t, key), "the rerun wrote the same object")
			var out bytes.Buffer
			n, err := archive.Export(b.ctx, archive.DirSource(b.root), archive.Query{Tenant: "t1"}, &out)
			require.NoError(t, err)
			require.Equal(t, 12, n, "each record once")
		})
	}
}

// An object that is not what its manifest says fails the read.
func TestSearchChecksTheDigest(t *testing.T) {
	b := setup(t)
	b.seed(t)
	_, err := b.archiver(history.Policy{Days: 90}).Pass(b.ctx)
	require.NoError(t, err)
	m, err := archive.ReadManifest(b.ctx, b.store, "t1")
	require.NoError(t, err)
	path := filepath.Join(b.root, filepath.FromSlash(m.Objects[1].Key))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 0xff
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	_, err = archive.Search(b.ctx, archive.DirSource(b.root), archive.Query{Tenant: "t1", Requester: "bob"})
	require.ErrorIs(t, err, archive.ErrIntegrity)
	// The hour before it still reads: bound the search to it.
	found, err := archive.Search(b.ctx, archive.DirSource(b.root), archive.Query{Tenant: "t1", ID: "cmd_a", Until: m.Objects[1].Hour})
	require.NoError(t, err)
	require.Len(t, found, 1)
}

func (b *bed) ids(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id FROM commands ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

// A record's key (what a rerun matches the object's lines by, so that
// each record is there once) is taken from the row's id as it is read,
// not parsed back out of its line: both give the same key, for commands,
// events and River's jobs.
func TestARecordsKeyFromItsIDIsItsLinesKey(t *testing.T) {
	b := setup(t)
	b.seed(t)
	a := b.archiver(history.Policy{Days: 90})
	types := map[string]int{}
	for _, tenant := range []string{"t1", ""} {
		fromID, parsed, err := a.HourKeys(b.ctx, tenant, base)
		require.NoError(t, err)
		require.Equal(t, parsed, fromID, "tenant %q", tenant)
		for _, k := range fromID {
			typ, _, _ := strings.Cut(k, ":")
			types[typ]++
		}
	}
	for _, typ := range []string{archive.TypeCommand, archive.TypeEvent, archive.TypeJob} {
		require.Positive(t, types[typ], "the seeded hour has a %s", typ)
	}
}
