package mocksmi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every command line the GPU kinds run (plugins/internal/gpu/smi) reads as
// the query or action it is.
func TestParseArgsReadsTheKindsCommandLines(t *testing.T) {
	for _, c := range []struct {
		args string
		want Invocation
	}{
		{"--query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits",
			Invocation{Query: QueryGPU, Fields: []string{"index", "uuid", "pci.bus_id"}}},
		{"--query-gpu=uuid,persistence_mode --format=csv,noheader,nounits -i GPU-1",
			Invocation{Query: QueryGPU, Fields: []string{"uuid", "persistence_mode"}, Target: "GPU-1"}},
		{"--query-remapped-rows=gpu_uuid,remapped_rows.pending --format=csv",
			Invocation{Query: QueryRemappedRows, Fields: []string{"gpu_uuid", "remapped_rows.pending"}, Header: true}},
		{"--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits",
			Invocation{Query: QueryComputeApps, Fields: []string{"gpu_uuid", "pid", "used_memory"}}},
		{"-pm 0 -i GPU-1", Invocation{Action: ActionPersistence, Target: "GPU-1"}},
		{"-pm 1 -i 3", Invocation{Action: ActionPersistence, Persistence: true, Target: "3"}},
		{"--gpu-reset -i GPU-1", Invocation{Action: ActionReset, Target: "GPU-1"}},
		{"-r --id=00000000:48:00.0", Invocation{Action: ActionReset, Target: "00000000:48:00.0"}},
	} {
		got, err := ParseArgs(strings.Fields(c.args))
		require.NoError(t, err, c.args)
		require.Equal(t, c.want, got, c.args)
	}
}

// Bad input gets exit 2's error, naming what was wrong.
func TestParseArgsRefusesWhatItDoesNotKnow(t *testing.T) {
	for args, want := range map[string]string{
		"":                                     "no query or action",
		"--foo":                                `unknown argument "--foo"`,
		"--query-gpu=uuid":                     "--query-* needs --format=csv",
		"--query-gpu= --format=csv":            "--query-gpu needs a list of fields",
		"--query-gpu=uuid,,index --format=csv": "an empty field",
		"--query-gpu=uuid --format=json":       "--format=json: want csv",
		"--gpu-reset":                          "give -i <GPU>",
		"-pm 2 -i 0":                           `-pm "2": want 0 or 1`,
		"-pm":                                  "-pm needs 0 or 1",
		"--gpu-reset -i":                       "-i needs a GPU",
		"--gpu-reset -i 0 -i 1":                "-i given twice",
		"--gpu-reset -pm 1 -i 0":               "one query or action at a time",
		"-pm 1 -i 0 --format=csv":              "--format goes with a --query-*",
	} {
		_, err := ParseArgs(strings.Fields(args))
		require.ErrorIs(t, err, ErrUsage, args)
		require.ErrorContains(t, err, want, args)
	}
}

// FuzzParseArgs: any command line parses or is refused as usage, never
// panics, and what parses is one query with fields or one action on one GPU.
func FuzzParseArgs(f *testing.F) {
	f.Add("--query-gpu=index,uuid,pci.bus_id\x00--format=csv,noheader,nounits")
	f.Add("--gpu-reset\x00-i\x00GPU-1")
	f.Add("-pm\x001\x00--id=3")
	f.Add("--query-compute-apps=\x00--format=csv")
	f.Fuzz(func(t *testing.T, line string) {
		inv, err := ParseArgs(strings.Split(line, "\x00"))
		if err != nil {
			require.ErrorIs(t, err, ErrUsage)
			return
		}
		if (inv.Query == "") == (inv.Action == "") {
			t.Fatalf("not exactly one query or action: %+v", inv)
		}
		if inv.Query != "" && len(inv.Fields) == 0 {
			t.Fatalf("a query without fields: %+v", inv)
		}
		if inv.Action != "" && inv.Target == "" {
			t.Fatalf("an action without a GPU: %+v", inv)
		}
	})
}
