package wipe

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
)

// BlockSize is the readback's unit.
const BlockSize = 4096

// MetadataRegion is how much the metadata mode zeroes at each end of the
// disk: the MBR and primary GPT with room for an alignment gap at the
// start, the backup GPT and md 0.90/1.0 superblocks at the end.
const MetadataRegion = 1 << 20

// Readback is the sampled read after the wipe.
type Readback struct {
	BlockSize int `json:"blockSize"`
	// Expect is "zeros" (metadata, overwrite) or "changed" (a drive's own
	// erase: every block that held data before reads differently after,
	// as a crypto erase leaves it).
	Expect string `json:"expect"`
	// Samples are the random blocks read, with their SHA-256 before and after.
	Samples []Sample `json:"samples,omitempty"`
	// Regions are byte ranges checked whole ([start, end)).
	Regions [][2]int64 `json:"regions,omitempty"`
	// Zero, Changed and Unchanged count the blocks read by their verdict.
	Zero      int    `json:"zero"`
	Changed   int    `json:"changed"`
	Unchanged int    `json:"unchanged"`
	Passed    bool   `json:"passed"`
	Summary   string `json:"summary"`
}

// Sample is one block read before and after.
type Sample struct {
	Offset int64  `json:"offset"`
	Before string `json:"sha256Before"`
	After  string `json:"sha256After"`
}

type plan struct {
	size    int64
	expect  string
	offsets []int64 // sampled blocks
	regions [][2]int64
}

func planReadback(size int64, samples int, mode Mode) (*plan, error) {
	if size < BlockSize {
		return nil, fmt.Errorf("device of %d bytes is smaller than one %d-byte block", size, BlockSize)
	}
	p := &plan{size: size, expect: "zeros"}
	last := (size/BlockSize - 1) * BlockSize
	if mode == ModeMetadata {
		p.regions = metadataRegions(size)
		return p, nil
	}
	if mode != ModeOverwrite {
		p.expect = "changed"
	}
	seen := map[int64]bool{0: true, last: true}
	p.offsets = []int64{0, last}
	blocks := size / BlockSize
	for len(p.offsets) < samples+2 && int64(len(p.offsets)) < blocks {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		off := int64(binary.LittleEndian.Uint64(b[:])%uint64(blocks)) * BlockSize
		if !seen[off] {
			seen[off] = true
			p.offsets = append(p.offsets, off)
		}
	}
	sort.Slice(p.offsets, func(i, j int) bool { return p.offsets[i] < p.offsets[j] })
	return p, nil
}

// metadataRegions are the ranges the metadata mode zeroes and checks.
func metadataRegions(size int64) [][2]int64 {
	head := min(int64(MetadataRegion), size)
	tailStart := max(size-MetadataRegion, head)
	tailStart -= tailStart % BlockSize
	rs := [][2]int64{{0, head}}
	if tailStart < size {
		rs = append(rs, [2]int64{tailStart, size})
	}
	return rs
}

// blocks is what one read of the plan saw: the blocks' bytes' SHA-256 and
// whether each was all zeros, in plan order (samples, then region blocks).
type blocks struct {
	sums  [][32]byte
	zeros []bool
}

func (p *plan) read(f *os.File) (blocks, error) {
	var out blocks
	buf := make([]byte, BlockSize)
	readAt := func(off int64) error {
		n, err := f.ReadAt(buf, off)
		if err != nil && !(err == io.EOF && n > 0) {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		out.sums = append(out.sums, sha256.Sum256(buf[:n]))
		out.zeros = append(out.zeros, allZero(buf[:n]))
		return nil
	}
	for _, off := range p.offsets {
		if err := readAt(off); err != nil {
			return out, err
		}
	}
	for _, r := range p.regions {
		for off := r[0]; off < r[1]; off += BlockSize {
			if err := readAt(off); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func (p *plan) verdict(before, after blocks) Readback {
	rb := Readback{BlockSize: BlockSize, Expect: p.expect, Regions: p.regions}
	for i := range after.sums {
		switch {
		case after.zeros[i]:
			rb.Zero++
		case after.sums[i] != before.sums[i]:
			rb.Changed++
		default:
			rb.Unchanged++
		}
		if i < len(p.offsets) {
			rb.Samples = append(rb.Samples, Sample{Offset: p.offsets[i], Before: hex.EncodeToString(before.sums[i][:]), After: hex.EncodeToString(after.sums[i][:])})
		}
	}
	total := len(after.sums)
	switch p.expect {
	case "zeros":
		rb.Passed = rb.Zero == total
		rb.Summary = fmt.Sprintf("%d of %d blocks read back as zeros", rb.Zero, total)
	default:
		// A block that was all zeros before proves nothing either way; one
		// that held data must read differently.
		stale := 0
		for i := range after.sums {
			if !before.zeros[i] && !after.zeros[i] && after.sums[i] == before.sums[i] {
				stale++
			}
		}
		rb.Passed = stale == 0
		rb.Summary = fmt.Sprintf("%d of %d blocks that held data read back unchanged (%d zero, %d changed)", stale, total, rb.Zero, rb.Changed)
	}
	return rb
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
