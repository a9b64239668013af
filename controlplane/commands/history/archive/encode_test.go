package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// "the same lines always make the same bytes" holds with the encoder kept
// between objects: each object EncodeObject writes, whatever it wrote
// before, is byte for byte what a new encoder with the same settings writes.
func TestAReusedEncoderWritesTheSameBytes(t *testing.T) {
	fresh := func(lines [][]byte) []byte {
		var buf bytes.Buffer
		enc, err := zstd.NewWriter(&buf, encoderOptions()...)
		require.NoError(t, err)
		require.NoError(t, writeLines(enc, lines))
		return buf.Bytes()
	}
	objects := [][][]byte{
		{[]byte(`{"type":"command","row":{"id":"cmd_1"}}`)},
		nil,
		{[]byte(`{"type":"event","row":{"id":"7"}}`), bytes.Repeat([]byte("x"), 300<<10)},
	}
	for i := range 200 {
		objects = append(objects, [][]byte{[]byte(fmt.Sprintf(`{"type":"command","row":{"id":"cmd_%d","n":%d}}`, i, i*i))})
	}
	for round := range 2 {
		for i, lines := range objects {
			got, sum, err := EncodeObject(lines)
			require.NoError(t, err)
			want := fresh(lines)
			require.Equal(t, want, got, "round %d, object %d", round, i)
			d := sha256.Sum256(want)
			require.Equal(t, hex.EncodeToString(d[:]), sum)
		}
	}
}
