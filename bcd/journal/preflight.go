package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt's on-disk meta page, as documented in go.etcd.io/bbolt's
// internal/common: a 16-byte page header, then magic, version, page size,
// flags, the root bucket (root pgid, sequence), the freelist pgid, the
// high-water pgid, the txid and an FNV-64a checksum of the fields before it.
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	metaChecksumSpan = 56
	noFreelist       = ^uint64(0)
)

type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// preflight reads the file's two meta pages before bbolt maps it. bbolt
// trusts the meta page's high-water mark and reads the mapping without
// bounds checks, so a truncated file whose meta pages survived faults with
// SIGBUS, which no recover catches: a crash loop. preflight turns that into
// an error, which Open treats as corruption. A missing file passes.
func preflight(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size == 0 {
		return errors.New("the file is empty")
	}
	m0, err0 := readMeta(f, 0)
	var m1 boltMeta
	err1 := errors.New("no second meta page")
	if err0 == nil {
		m1, err1 = readMeta(f, int64(m0.pageSize))
	} else {
		// The first meta page is damaged; bbolt then finds the second by
		// trying the usual page sizes. Do the same.
		for _, ps := range []int64{4096, 8192, 16384, 65536} {
			if m1, err1 = readMeta(f, ps); err1 == nil && int64(m1.pageSize) == ps {
				break
			}
			err1 = errors.New("no valid meta page")
		}
	}
	var m boltMeta
	switch {
	case err0 == nil && err1 == nil:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case err0 == nil:
		m = m0
	case err1 == nil:
		m = m1
	default:
		return fmt.Errorf("no valid meta page: %w", err0)
	}
	if m.pgid < 2 {
		return fmt.Errorf("meta page: high-water page %d is below the meta pages", m.pgid)
	}
	if need := int64(m.pgid) * int64(m.pageSize); need > size || need < 0 {
		return fmt.Errorf("the file is %d bytes, but its meta page needs %d (truncated)", size, need)
	}
	if m.root >= m.pgid || m.root < 2 {
		return fmt.Errorf("meta page: root page %d outside 2..%d", m.root, m.pgid)
	}
	if m.freelist != noFreelist && (m.freelist >= m.pgid || m.freelist < 2) {
		return fmt.Errorf("meta page: freelist page %d outside 2..%d", m.freelist, m.pgid)
	}
	return nil
}

func readMeta(r io.ReaderAt, off int64) (boltMeta, error) {
	buf := make([]byte, pageHeaderSize+metaChecksumSpan+8)
	if _, err := r.ReadAt(buf, off); err != nil {
		return boltMeta{}, fmt.Errorf("reading the meta page at %d: %w", off, err)
	}
	b := buf[pageHeaderSize:]
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != boltMagic {
		return boltMeta{}, errors.New("meta page: bad magic")
	}
	if le.Uint32(b[4:]) != boltVersion {
		return boltMeta{}, errors.New("meta page: unknown version")
	}
	h := fnv.New64a()
	_, _ = h.Write(b[:metaChecksumSpan])
	if h.Sum64() != le.Uint64(b[metaChecksumSpan:]) {
		return boltMeta{}, errors.New("meta page: bad checksum")
	}
	m := boltMeta{
		pageSize: le.Uint32(b[8:]),
		root:     le.Uint64(b[16:]),
		freelist: le.Uint64(b[32:]),
		pgid:     le.Uint64(b[40:]),
		txid:     le.Uint64(b[48:]),
	}
	if m.pageSize < 512 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("meta page: page size %d", m.pageSize)
	}
	return m, nil
}
