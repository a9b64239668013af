package ids

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPrefixesAndShape(t *testing.T) {
	for p, f := range map[Prefix]func() string{Command: NewCommand, Batch: NewBatch, Node: NewNode, Tenant: NewTenant} {
		id := f()
		require.True(t, strings.HasPrefix(id, string(p)), id)
		require.Len(t, id, len(p)+bodyLen)
		require.True(t, Valid(p, id), id)
		require.False(t, Valid(Prefix("x_"), id))
	}
}

// Ids are time-ordered: made later, they sort later, also within one millisecond.
func TestTimeOrdered(t *testing.T) {
	var all []string
	before := time.Now().Add(-time.Millisecond)
	for range 10000 {
		all = append(all, NewCommand())
	}
	require.True(t, sort.StringsAreSorted(all))
	seen := map[string]bool{}
	for _, id := range all {
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
	}
	ts, err := Parse(Command, all[0])
	require.NoError(t, err)
	require.WithinDuration(t, before, ts, 2*time.Second)
}

// A clock that steps back does not make ids go back.
func TestClockStepBack(t *testing.T) {
	genMu.Lock()
	saved := nowFunc
	base := time.Now()
	nowFunc = func() time.Time { return base }
	genMu.Unlock()
	defer func() { genMu.Lock(); nowFunc = saved; genMu.Unlock() }()
	a := NewNode()
	genMu.Lock()
	nowFunc = func() time.Time { return base.Add(-time.Hour) }
	genMu.Unlock()
	b := NewNode()
	require.Less(t, a, b)
}

func TestParseRefuses(t *testing.T) {
	for _, bad := range []string{"", "cmd_", "node_01ARZ3NDEKTSV4RRFFQ69G5FAV", "cmd_01ARZ3NDEKTSV4RRFFQ69G5FA", "cmd_01ARZ3NDEKTSV4RRFFQ69G5FAU!", "cmd_81ARZ3NDEKTSV4RRFFQ69G5FAV", "cmd_01arz3ndektsv4rrffq69g5fav"} {
		_, err := Parse(Command, bad)
		require.ErrorIs(t, err, ErrMalformed, bad)
	}
	_, err := Parse(Command, "cmd_01ARZ3NDEKTSV4RRFFQ69G5FAV")
	require.NoError(t, err)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"cmd_01ARZ3NDEKTSV4RRFFQ69G5FAV", "cmd_7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "cmd_", "", "cmd_81ARZ3NDEKTSV4RRFFQ69G5FAV"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := Parse(Command, s)
		if err != nil {
			return
		}
		// A well-formed id re-encodes to itself.
		body := strings.TrimPrefix(s, string(Command))
		var hi, lo uint64
		for i := 0; i < bodyLen; i++ {
			d := strings.IndexByte(alphabet, body[i])
			hi = hi<<5 | lo>>59
			lo = lo<<5 | uint64(d)
		}
		require.Equal(t, body, encode(hi, lo))
		require.Equal(t, int64(hi>>16), ts.UnixMilli())
	})
}
