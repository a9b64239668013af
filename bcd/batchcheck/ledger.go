package batchcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/commands/internal/trust"
)

// FileName is the ledger's file in the state directory.
const FileName = "batches.json"

// ledgerVersion is the ledger file's format version.
const ledgerVersion = 1

// maxLedgerBytes bounds what decodeLedger reads: a node's live batch leaves
// and one hour of break-glass commands are far below it.
const maxLedgerBytes = 4 << 20

// window is the break-glass allowance's sliding window: the allowance is
// "unbatchedDestructivePerHour".
const window = time.Hour

// ErrLedgerMalformed is returned for a ledger file that does not decode.
var ErrLedgerMalformed = errors.New("malformed batch ledger")

// ledger is what the node consumed, persisted as FileName: the batch leaves
// accepted commands ran on, and the unbatched destructive commands of the
// last hour the break-glass allowance admitted. A ledger is never changed
// in place: advance makes the next one, which replaces it once persisted.
type ledger struct {
	// clock is the latest time the ledger was written at. The ledger's
	// time never goes back: a node clock set back cannot bring back a leaf
	// the ledger forgot, nor an hour of allowance it already spent.
	clock time.Time
	// leaves are the consumed leaves, kept until their batch's deadline is
	// behind clock (less the clock skew VerifyBatch allows).
	leaves map[leafKey]consumedLeaf
	// unbatched are the unbatched destructive commands accepted on the
	// allowance, kept for an hour after clock reaches them.
	unbatched []unbatchedUse
}

// ledgerFile is the ledger's file format.
type ledgerFile struct {
	Version   int            `json:"version"`
	Clock     time.Time      `json:"clock"`
	Leaves    []consumedLeaf `json:"leaves"`
	Unbatched []unbatchedUse `json:"unbatched"`
}

// consumedLeaf is one (batch, leaf) and the command that ran on it.
type consumedLeaf struct {
	BatchID   string    `json:"batchId"`
	LeafIndex uint64    `json:"leafIndex"`
	CommandID string    `json:"commandId"`
	NotAfter  time.Time `json:"notAfter"`
}

// unbatchedUse is one command the break-glass allowance admitted, and when.
type unbatchedUse struct {
	CommandID string    `json:"commandId"`
	At        time.Time `json:"at"`
}

// leafKey names a leaf: its batch and its index in the batch's tree.
type leafKey struct {
	batch string
	index uint64
}

func newLedger() *ledger { return &ledger{leaves: map[leafKey]consumedLeaf{}} }

// horizon is the deadline at or before which a batch's leaves may have
// been forgotten: VerifyBatch refuses such a batch at clock anyway, and
// the checker refuses it whatever the node's clock says.
func (l *ledger) horizon() time.Time { return l.clock.Add(-trust.DefaultClockSkew) }

// now is t, or the ledger's clock when t is earlier.
func (l *ledger) now(t time.Time) time.Time {
	if t.Before(l.clock) {
		return l.clock
	}
	return t
}

// usedSince counts the allowance spent after since, and reports whether
// commandID is among it.
func (l *ledger) usedSince(since time.Time, commandID string) (int, bool) {
	n, found := 0, false
	for _, u := range l.unbatched {
		if u.At.After(since) {
			n++
		}
		if u.CommandID == commandID {
			found = true
		}
	}
	return n, found
}

// advance returns a copy of the ledger moved to t (never back) with what it
// may forget at t forgotten.
func (l *ledger) advance(t time.Time) *ledger {
	next := &ledger{clock: l.now(t), leaves: make(map[leafKey]consumedLeaf, len(l.leaves)+1)}
	h := next.horizon()
	for k, c := range l.leaves {
		if c.NotAfter.After(h) {
			next.leaves[k] = c
		}
	}
	since := next.clock.Add(-window)
	for _, u := range l.unbatched {
		if u.At.After(since) {
			next.unbatched = append(next.unbatched, u)
		}
	}
	return next
}

// encode is the ledger's file content, its entries in one order.
func (l *ledger) encode() ([]byte, error) {
	out := ledgerFile{Version: ledgerVersion, Clock: l.clock, Leaves: []consumedLeaf{}, Unbatched: slices.Clone(l.unbatched)}
	for _, c := range l.leaves {
		out.Leaves = append(out.Leaves, c)
	}
	if out.Unbatched == nil {
		out.Unbatched = []unbatchedUse{}
	}
	slices.SortFunc(out.Leaves, func(a, b consumedLeaf) int {
		if c := strings.Compare(a.BatchID, b.BatchID); c != 0 {
			return c
		}
		return compareUint(a.LeafIndex, b.LeafIndex)
	})
	slices.SortStableFunc(out.Unbatched, func(a, b unbatchedUse) int { return a.At.Compare(b.At) })
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding the batch ledger: %w", err)
	}
	return b, nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// decodeLedger reads a ledger file strictly: unknown fields, trailing data,
// another version, an entry without its batch, command or time, and a leaf
// recorded twice are errors, so that two readers never see two ledgers.
func decodeLedger(b []byte) (*ledger, error) {
	if len(b) > maxLedgerBytes {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrLedgerMalformed, len(b), maxLedgerBytes)
	}
	var f ledgerFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLedgerMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data", ErrLedgerMalformed)
	}
	if f.Version != ledgerVersion {
		return nil, fmt.Errorf("%w: version %d (this bcd reads %d)", ErrLedgerMalformed, f.Version, ledgerVersion)
	}
	if f.Clock.IsZero() {
		return nil, fmt.Errorf("%w: no clock", ErrLedgerMalformed)
	}
	l := &ledger{clock: f.Clock, leaves: make(map[leafKey]consumedLeaf, len(f.Leaves))}
	for i, c := range f.Leaves {
		if c.BatchID == "" || c.CommandID == "" || c.NotAfter.IsZero() {
			return nil, fmt.Errorf("%w: leaf entry %d is incomplete", ErrLedgerMalformed, i)
		}
		k := leafKey{c.BatchID, c.LeafIndex}
		if _, dup := l.leaves[k]; dup {
			return nil, fmt.Errorf("%w: leaf %d of batch %s recorded twice", ErrLedgerMalformed, c.LeafIndex, c.BatchID)
		}
		l.leaves[k] = c
	}
	for i, u := range f.Unbatched {
		if u.CommandID == "" || u.At.IsZero() {
			return nil, fmt.Errorf("%w: break-glass entry %d is incomplete", ErrLedgerMalformed, i)
		}
	}
	l.unbatched = f.Unbatched
	return l, nil
}
