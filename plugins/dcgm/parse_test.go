package dcgm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/plugins/dcgm"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

type row struct {
	test, status string
	gpu          int // -1: the node
}

func rows(rep dcgm.Report) []row {
	var out []row
	for _, r := range rep.Results {
		g := -1
		if r.GPU != nil {
			g = *r.GPU
		}
		out = append(out, row{r.Test, r.Status, g})
	}
	return out
}

func TestParseDCGM3Level1(t *testing.T) {
	rep, err := dcgm.ParseDiag(fixture(t, "diag-r1-j-dcgm3-tesla-t4-pass.json"))
	require.NoError(t, err)
	require.Equal(t, dcgm.ShapeDCGM3, rep.Shape)
	require.Len(t, rep.Results, 9)
	for _, r := range rep.Results {
		require.Equal(t, "Deployment", r.Category)
		require.Equal(t, dcgm.StatusPass, r.Status)
		require.Equal(t, "Pass", r.Raw)
		require.Nil(t, r.GPU, "deployment tests name no GPU")
	}
	require.Equal(t, "Denylist", rep.Results[0].Test)
	require.Equal(t, dcgm.StatusPass, rep.Overall())
}

func TestParseDCGM3Level3(t *testing.T) {
	rep, err := dcgm.ParseDiag(fixture(t, "diag-r3-j-dcgm3-tesla-t4-pass.json"))
	require.NoError(t, err)
	require.Equal(t, dcgm.ShapeDCGM3, rep.Shape)
	require.Len(t, rep.Results, 9+1+3+3)
	got := rows(rep)
	require.Contains(t, got, row{"PCIe", dcgm.StatusPass, 0})
	require.Contains(t, got, row{"EUD Test", dcgm.StatusSkip, 0})
	require.Contains(t, got, row{"Targeted Power", dcgm.StatusPass, 0})
	for _, r := range rep.Results {
		if r.Test == "GPU Memory" {
			require.Equal(t, "Hardware", r.Category)
			require.Equal(t, []string{"GPU 0 Allocated 15206918958 bytes (97.3%)"}, r.Info)
		}
	}
	require.Equal(t, dcgm.StatusPass, rep.Overall())
}

func TestParseDCGM3Failure(t *testing.T) {
	rep, err := dcgm.ParseDiag(fixture(t, "diag-r2-j-dcgm3-synthetic-fail.json"))
	require.NoError(t, err)
	require.Equal(t, dcgm.ShapeDCGM3, rep.Shape)
	require.Equal(t, "3.3.9", rep.Version)
	require.Equal(t, []row{
		{"Denylist", dcgm.StatusPass, -1},
		{"GPU Memory", dcgm.StatusPass, 0},
		{"GPU Memory", dcgm.StatusFail, 1},
	}, rows(rep))
	require.Contains(t, rep.Results[2].Warnings[0], "Error using CUDA API cudaMalloc")
	require.Equal(t, dcgm.StatusFail, rep.Overall())
}

// DCGM 4 moves the tests to the top level and writes statuses in upper case
// (synthetic fixture: see testdata/README.md).
func TestParseDCGM4(t *testing.T) {
	rep, err := dcgm.ParseDiag(fixture(t, "diag-r2-j-dcgm4-synthetic-fail.json"))
	require.NoError(t, err)
	require.Equal(t, dcgm.ShapeDCGM4, rep.Shape)
	require.Equal(t, "4.2.3", rep.Version)
	require.Equal(t, []row{
		{"software", dcgm.StatusPass, -1},
		{"pcie", dcgm.StatusPass, 0},
		{"pcie", dcgm.StatusFail, 1},
		{"memory", dcgm.StatusPass, 0},
		{"memory", dcgm.StatusWarn, 1},
		{"targeted_stress", dcgm.StatusSkip, 0},
		{"targeted_stress", dcgm.StatusSkip, 1},
	}, rows(rep))
	require.Equal(t, "Integration", rep.Results[2].Category)
	require.Equal(t, "FAIL", rep.Results[2].Raw)
	require.Equal(t, []string{"GPU 1 PCIe link width x8 is below the expected x16"}, rep.Results[2].Warnings)
	require.Equal(t, []string{"GPU 1 memory test ran with reduced allocation"}, rep.Results[4].Warnings)
	require.Equal(t, []string{"skipped after an earlier failure"}, rep.Results[6].Info)
	require.Equal(t, dcgm.StatusFail, rep.Overall())
}

func TestParseLenience(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []row
	}{
		"text before the JSON and gpu_ids listing two GPUs": {
			in:   "Warning: something\n{\"DCGM GPU Diagnostic\":{\"test_categories\":[{\"category\":\"Hardware\",\"tests\":[{\"name\":\"Diagnostic\",\"results\":[{\"gpu_ids\":\"0,1\",\"status\":\"Warn\"}]}]}]}}",
			want: []row{{"Diagnostic", dcgm.StatusWarn, 0}, {"Diagnostic", dcgm.StatusWarn, 1}},
		},
		"numeric and array GPU ids": {
			in:   `{"tests":[{"name":"a","results":[{"gpu_id":3,"status":"passed"},{"gpu_ids":[4,5],"status":"Skipped"}]}]}`,
			want: []row{{"a", dcgm.StatusPass, 3}, {"a", dcgm.StatusSkip, 4}, {"a", dcgm.StatusSkip, 5}},
		},
		"a test with only a summary": {
			in:   `{"DCGM Diagnostic":{"test_categories":[{"category":"Stress","tests":[{"name":"pulse","test_summary":{"status":"Fail"}}]}]}}`,
			want: []row{{"pulse", dcgm.StatusFail, -1}},
		},
		"an unknown status word": {
			in:   `{"tests":[{"name":"x","results":[{"entity_id":0,"status":"Interrupted"}]}]}`,
			want: []row{{"x", dcgm.StatusUnknown, 0}},
		},
		"a non-GPU entity": {
			in:   `{"tests":[{"name":"nvswitch","results":[{"entity_group":"NvSwitch","entity_id":2,"status":"PASS"}]}]}`,
			want: []row{{"nvswitch", dcgm.StatusPass, -1}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rep, err := dcgm.ParseDiag([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, rows(rep))
		})
	}
}

func TestParseRuntimeError(t *testing.T) {
	rep, err := dcgm.ParseDiag([]byte(`{"DCGM GPU Diagnostic":{"runtime_error":"Error: GPU 0 is in use by another process"}}`))
	require.NoError(t, err)
	require.Equal(t, []string{"Error: GPU 0 is in use by another process"}, rep.Errors)
	require.Equal(t, dcgm.StatusFail, rep.Overall())
}

func TestParseRefusals(t *testing.T) {
	for name, in := range map[string]string{
		"empty":        "",
		"not JSON":     "Error: unable to establish a connection to the specified host: localhost",
		"broken JSON":  `{"tests":[`,
		"no tests":     `{"DCGM GPU Diagnostic":{}}`,
		"only a array": `[1,2,3]`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := dcgm.ParseDiag([]byte(in))
			require.Error(t, err)
		})
	}
	_, err := dcgm.ParseDiag([]byte(`{"DCGM GPU Diagnostic":{}}`))
	require.ErrorIs(t, err, dcgm.ErrNoResults)
}

// allPass is one passing test result, to bury in shapes that are neither
// DCGM 3's nor DCGM 4's.
const allPass = `{"category":"Hardware","tests":[{"name":"Diagnostic","results":[{"gpu_ids":"0","status":"Pass"}]}]}`

// A document whose shape is neither DCGM 3's nor DCGM 4's is refused, with
// an error naming its shape: a malformed all-pass document must never pass
// because the lenient walk found passing tests somewhere in it.
func TestParseRefusesAShapeOfNeitherDCGM3NorDCGM4(t *testing.T) {
	for name, tc := range map[string]struct{ in, msg string }{
		"DCGM 3's key holding an array": {
			`{"DCGM GPU Diagnostic":[` + allPass + `]}`,
			`"DCGM GPU Diagnostic" is an array, not DCGM 3's object of test_categories`,
		},
		"DCGM 3's test_categories not a list": {
			`{"DCGM GPU Diagnostic":{"test_categories":` + allPass + `}}`,
			`"DCGM GPU Diagnostic".test_categories is an object, not a list`,
		},
		"DCGM 4's key holding an array": {
			`{"DCGM Diagnostic":[` + allPass + `]}`,
			`"DCGM Diagnostic" is an array, not DCGM 4's object`,
		},
		"DCGM 4's tests not a list": {
			`{"version":"4.2.3","tests":{"name":"pcie","results":[{"entity_id":0,"status":"PASS"}]}}`,
			`"tests" is an object, not DCGM 4's list of tests`,
		},
		"tests buried under another key": {
			`{"report":{"test_categories":[` + allPass + `]}}`,
			`top-level keys "report": neither DCGM 3's "DCGM GPU Diagnostic" nor DCGM 4's "tests" or "DCGM Diagnostic"`,
		},
		"both shapes at once": {
			`{"DCGM GPU Diagnostic":{"test_categories":[` + allPass + `]},"tests":[]}`,
			`both DCGM 3's "DCGM GPU Diagnostic" and DCGM 4's "tests"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := dcgm.ParseDiag([]byte(tc.in))
			require.ErrorIs(t, err, dcgm.ErrUnknownShape)
			require.ErrorContains(t, err, tc.msg)
			require.Empty(t, rep.Results)
		})
	}
}

func FuzzParseDiag(f *testing.F) {
	for _, name := range []string{"diag-r1-j-dcgm3-tesla-t4-pass.json", "diag-r2-j-dcgm4-synthetic-fail.json"} {
		f.Add(fixture(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := dcgm.ParseDiag(b)
		if err != nil {
			return
		}
		for _, r := range rep.Results {
			switch r.Status {
			case dcgm.StatusPass, dcgm.StatusFail, dcgm.StatusWarn, dcgm.StatusSkip, dcgm.StatusUnknown:
			default:
				t.Fatalf("status %q is not one of the five", r.Status)
			}
			if r.GPU != nil && *r.GPU < 0 {
				t.Fatalf("negative GPU id %d", *r.GPU)
			}
		}
		if rep.Shape != dcgm.ShapeDCGM3 && rep.Shape != dcgm.ShapeDCGM4 {
			t.Fatalf("accepted a report of shape %q", rep.Shape)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("report does not marshal: %v", err)
		}
		_ = rep.Overall()
	})
}
