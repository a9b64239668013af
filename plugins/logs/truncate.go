package logs

import (
	"bytes"
	"io"
	"os"
	"sort"
)

// waterFill splits a budget of total bytes among logs of the given sizes so
// that each keeps min(size, level) for one level: small logs stay whole, and
// the largest lose the most. It returns the bytes each may keep.
func waterFill(sizes []int64, total int64) []int64 {
	keep := make([]int64, len(sizes))
	if total <= 0 {
		return keep
	}
	idx := make([]int, len(sizes))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return sizes[idx[a]] < sizes[idx[b]] })
	left := total
	for n, i := range idx {
		share := left / int64(len(idx)-n)
		if sizes[i] <= share {
			keep[i] = sizes[i]
		} else {
			keep[i] = share
		}
		left -= keep[i]
	}
	return keep
}

// lineStart returns the offset at which to start a file of size bytes so
// that at most keep bytes remain and they begin at a line: the first byte
// after a newline at or after size-keep. A file that keeps nothing starts at
// size. minOff forces at least that offset (a file whose head was dropped
// while collecting starts mid-line).
func lineStart(r io.ReaderAt, size, keep, minOff int64) (int64, error) {
	from := max(size-keep, minOff, 0)
	if from == 0 {
		return 0, nil
	}
	if from >= size {
		return size, nil
	}
	// The byte before from ends a line: from is already a line start.
	var prev [1]byte
	if _, err := r.ReadAt(prev[:], from-1); err != nil {
		return 0, err
	}
	if prev[0] == '\n' {
		return from, nil
	}
	buf := make([]byte, 32<<10)
	for off := from; off < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1, nil
		}
		off += int64(n)
		if err != nil && err != io.EOF {
			return 0, err
		}
		if n == 0 {
			break
		}
	}
	return size, nil
}

// countLines counts the newlines in the first n bytes of path: the lines a
// truncation dropped.
func countLines(path string, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var lines int64
	buf := make([]byte, 64<<10)
	r := io.LimitReader(f, n)
	for {
		k, err := r.Read(buf)
		lines += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
	}
}
