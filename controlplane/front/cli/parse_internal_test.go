package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/controlplane/commands/fleetruns"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// --wait follows exactly the topics a run publishes: a topic added to
// fleetruns and missing here would leave the CLI waiting for its poll.
func TestRunTopicsAreFleetRunsTopics(t *testing.T) {
	want := []string{fleetruns.TopicCreated, fleetruns.TopicProgress, fleetruns.TopicPaused, fleetruns.TopicResumed,
		fleetruns.TopicCancelRequested, fleetruns.TopicStopping, fleetruns.TopicWaiting, fleetruns.TopicFinished}
	require.ElementsMatch(t, want, runTopics)
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 4, 16, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"1h":                        now.Add(-time.Hour),
		" 90s ":                     now.Add(-90 * time.Second),
		"7d":                        now.Add(-7 * 24 * time.Hour),
		"2026-12-04T15:00:00Z":      time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC),
		"2026-12-04T17:00:00+02:00": time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC),
	} {
		got, err := parseSince(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%q: %s, want %s", in, got, want)
	}
	for in, msg := range map[string]string{
		"":                    "empty",
		"yesterday":           "want a duration back from now",
		"0s":                  "must be more than 0",
		"-1h":                 "must be more than 0",
		"1.5d":                "want a duration back from now",
		"99999999d":           "want a duration back from now",
		"2026-13-04T15:00Z":   "want a duration back from now",
		"1000000000000000h":   "want a duration back from now",
		"2026-12-04 15:00:00": "want a duration back from now",
	} {
		_, err := parseSince(in, now)
		require.ErrorContains(t, err, msg, in)
	}
}

// A time flag's text never panics, and a time it accepts is at or before
// now when written as a duration.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"1h", "7d", "2026-12-04T15:00:00Z", "-30m", "0d", "9223372036854775807ns"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 4, 16, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSince(s, now)
		if err != nil {
			return
		}
		if _, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(s)); perr != nil {
			if !got.Before(now) || now.Sub(got) > maxAgo {
				t.Fatalf("%q: %s is not a time back from %s within %s", s, got, now, maxAgo)
			}
		}
	})
}

func TestParseLabelArgs(t *testing.T) {
	node, set, remove, err := parseLabelArgs([]string{"node_0412", "gpu=h200", "site.example/rack=r1", "-zone", "row-", "empty="})
	require.NoError(t, err)
	require.Equal(t, "node_0412", node)
	require.Equal(t, map[string]string{"gpu": "h200", "site.example/rack": "r1", "empty": ""}, set)
	require.Equal(t, []string{"zone", "row"}, remove)
	for _, bad := range [][]string{nil, {"-x"}, {"gpu=a"}, {"n", "-"}, {"n", "-a=b"}, {"n", "plain"}, {"n", "a=1", "a=2"}} {
		_, _, _, err := parseLabelArgs(bad)
		require.Error(t, err, "%q", bad)
	}
}

// nodes label's words never panic, and what they parse to accounts for
// every word: the node, a label set, or a key removed.
func FuzzParseLabelArgs(f *testing.F) {
	for _, s := range []string{"node_0412 gpu=h200 rack=r1", "node_0412 -rack zone-", "n = - -= a==", "node gpu=a gpu=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words := strings.Fields(s)
		node, set, remove, err := parseLabelArgs(words)
		if err != nil {
			return
		}
		if node != words[0] || strings.HasPrefix(node, "-") {
			t.Fatalf("%q: node %q", s, node)
		}
		for k, v := range set {
			if !slices.Contains(words[1:], k+"="+v) {
				t.Fatalf("%q: label %s=%s is no word", s, k, v)
			}
		}
		for _, k := range remove {
			if !slices.Contains(words[1:], "-"+k) && !slices.Contains(words[1:], k+"-") {
				t.Fatalf("%q: removal %q is no word", s, k)
			}
		}
		if len(set)+len(remove) > len(words)-1 {
			t.Fatalf("%q: more labels than words", s)
		}
	})
}

// The progress line and bar: counts of the runnable targets, what else
// happened to them, and what the run waits for.
func TestProgressSummaryAndBar(t *testing.T) {
	run := &apiv1.FleetRun{State: "running", WaitingReason: "budget-concurrent", WaitingMessage: "node node_3 waits: pool gpu-a is full",
		Counts: &apiv1.FleetRunCounts{Targets: 10, Succeeded: 3, Failures: 1, Started: 2, Waiting: 2, NotStarted: 1, Refused: 1}}
	require.Equal(t, "running  succeeded 3, failures 1, started 2, waiting 2 of 9 (1 not started, 1 refused); waiting: budget-concurrent: node node_3 waits: pool gpu-a is full",
		progressSummary(run))
	require.Equal(t, "[####----]", progressBar(run, 8), "5 of the 9 runnable targets are done, rounded down")
	require.Equal(t, "[--------]", progressBar(&apiv1.FleetRun{Counts: &apiv1.FleetRunCounts{Targets: 1, Refused: 1}}, 8), "nothing runnable")
	require.Equal(t, "ops (fleet-run run_1)", requesterText("ops", "fleet-run", "run_1"))
	require.Equal(t, "health (module:health)", requesterText("health", "module:health", ""))
	require.Equal(t, "-", requesterText("", "", ""))
}
