package gateways_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/fleet/gateways"
	"github.com/better-compute/commands/controlplane/internal/storetest"
)

// A gateway's row says how many sessions it holds; Live lists those that
// beat recently, the most loaded first; one that left is gone at once, and
// one that stopped beating drops out of Live once its row is older than
// the window.
func TestBeatLiveAndLeave(t *testing.T) {
	t.Parallel()
	db := storetest.DB(t)
	ctx := context.Background()
	require.NoError(t, gateways.Beat(ctx, db, "gw_a", "host-1", 10))
	require.NoError(t, gateways.Beat(ctx, db, "gw_b", "host-1", 30))
	require.NoError(t, gateways.Beat(ctx, db, "gw_c", "host-2", 20))
	require.NoError(t, gateways.Beat(ctx, db, "gw_a", "host-1", 12), "a second beat updates the row")

	live, err := gateways.Live(ctx, db, time.Minute)
	require.NoError(t, err)
	var got []string
	var counts []int
	for _, g := range live {
		got, counts = append(got, g.ID), append(counts, g.Sessions)
		require.False(t, g.SeenAt.Before(g.StartedAt))
	}
	require.Equal(t, []string{"gw_b", "gw_c", "gw_a"}, got, "the most loaded first; two gateways of one host keep a row each")
	require.Equal(t, []int{30, 20, 12}, counts)

	require.NoError(t, gateways.Leave(ctx, db, "gw_b"))
	_, err = db.Exec(ctx, `UPDATE gateways SET seen_at = now() - interval '2 minutes' WHERE id = 'gw_c'`)
	require.NoError(t, err)
	live, err = gateways.Live(ctx, db, time.Minute)
	require.NoError(t, err)
	require.Len(t, live, 1)
	require.Equal(t, "gw_a", live[0].ID, "gw_b left; gw_c stopped beating a minute ago")

	// A row that stopped beating an hour ago is forgotten by the next beat.
	_, err = db.Exec(ctx, `UPDATE gateways SET seen_at = now() - interval '2 hours' WHERE id = 'gw_c'`)
	require.NoError(t, err)
	require.NoError(t, gateways.Beat(ctx, db, "gw_a", "host-1", 12))
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM gateways`).Scan(&rows))
	require.Equal(t, 1, rows)

	require.Error(t, gateways.Beat(ctx, db, "gw_d", "host-3", -1), "a negative count is refused by the table")
}

// Excess: a gateway sheds only above the trigger and by at least the
// least excess, and then down to the mean.
func TestExcessShedsDownToTheMeanOnlyAboveTheTrigger(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		held  int
		live  []int
		above float64
		least int
		want  int
	}{
		{"alone: nowhere else to go", 500, []int{500}, 1.1, 16, 0},
		{"even", 100, []int{100, 100, 100}, 1.1, 16, 0},
		{"within the trigger", 110, []int{110, 100, 90}, 1.1, 16, 0},
		{"a restarted gateway beside two loaded ones", 150, []int{150, 150, 0}, 1.1, 16, 50},
		{"above the trigger by less than least", 12, []int{12, 4, 2}, 1.1, 16, 0},
		{"a gateway that died left its nodes to two", 200, []int{200, 100}, 1.1, 16, 50},
		{"the mean rounds up: never below it", 11, []int{11, 0}, 1.1, 1, 5},
		{"the least loaded never sheds", 0, []int{150, 150, 0}, 1.1, 16, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, gateways.Excess(c.held, c.live, c.above, c.least))
		})
	}
}
