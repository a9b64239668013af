package logs

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWaterFill(t *testing.T) {
	require.Equal(t, []int64{10, 45, 45}, waterFill([]int64{10, 100, 1000}, 100), "the small log stays whole, the large share the rest")
	require.Equal(t, []int64{10, 100, 1000}, waterFill([]int64{10, 100, 1000}, 5000))
	require.Equal(t, []int64{0, 0}, waterFill([]int64{5, 5}, 0))
	require.Equal(t, []int64{3, 3, 4}, waterFill([]int64{50, 50, 50}, 10), "the whole budget is used")
}

func TestLineStart(t *testing.T) {
	s := []byte("one\ntwo\nthree\n")
	r := bytes.NewReader(s)
	at := func(keep, minOff int64) string {
		off, err := lineStart(r, int64(len(s)), keep, minOff)
		require.NoError(t, err)
		return string(s[off:])
	}
	require.Equal(t, "one\ntwo\nthree\n", at(100, 0))
	require.Equal(t, "three\n", at(6, 0), "exactly a line")
	require.Equal(t, "three\n", at(8, 0), "never half a line")
	require.Equal(t, "two\nthree\n", at(10, 0))
	require.Equal(t, "", at(3, 0))
	require.Equal(t, "two\nthree\n", at(100, 1), "a head dropped while collecting starts mid-line")
}

// FuzzLineStart: whatever the content and the budget, what is kept is a
// suffix within the budget that starts at a line (or is empty), and nothing
// kept could have been kept with a later start.
func FuzzLineStart(f *testing.F) {
	f.Add([]byte("2026-04-12T10:00:00+0000 a\n2026-04-12T10:00:01+0000 b\n"), int64(30), int64(0))
	f.Add([]byte("no newline at all"), int64(5), int64(0))
	f.Add([]byte("\n\n\n"), int64(1), int64(1))
	f.Add([]byte(""), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, keep, minOff int64) {
		if keep < 0 || minOff < 0 {
			return
		}
		size := int64(len(data))
		off, err := lineStart(bytes.NewReader(data), size, keep, minOff)
		if err != nil {
			t.Fatal(err)
		}
		if off < 0 || off > size {
			t.Fatalf("offset %d outside 0..%d", off, size)
		}
		if size-off > keep {
			t.Fatalf("kept %d bytes, budget %d", size-off, keep)
		}
		if off < minOff && off != size {
			t.Fatalf("offset %d before minOff %d", off, minOff)
		}
		if off > 0 && off < size && data[off-1] != '\n' {
			t.Fatalf("kept part starts mid-line at %d", off)
		}
		// The earliest line start that fits was chosen.
		for i := max(size-keep, minOff, 0); i < off; i++ {
			if i == 0 || data[i-1] == '\n' {
				t.Fatalf("line start %d fits but %d was chosen", i, off)
			}
		}
	})
}
