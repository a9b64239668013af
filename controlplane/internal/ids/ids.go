// Package ids makes the control plane's identifiers: a type prefix (cmd_,
// batch_, node_, tenant_) before a time-ordered, 26-character body in
// Crockford base32 (48 bits of milliseconds, then 80 bits that are random for
// the first id of a millisecond and counted up after it). Ids sort by time as
// strings, so an index on them stays append-mostly.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Prefix is the type prefix of an id, underscore included.
type Prefix string

// The prefixes the control plane hands out.
const (
	Command Prefix = "cmd_"
	Batch   Prefix = "batch_"
	Node    Prefix = "node_"
	Tenant  Prefix = "tenant_"
	// Run is a fleet run's.
	Run Prefix = "run_"
	// Gateway is a gateway process's, drawn at its start (the gateways
	// table).
	Gateway Prefix = "gw_"
)

// bodyLen is the length of the base32 body: 128 bits in 5-bit digits.
const bodyLen = 26

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ErrMalformed is wrapped by every parse failure.
var ErrMalformed = errors.New("malformed id")

var (
	// genMu guards last, so that ids made in one millisecond keep rising.
	genMu   sync.Mutex
	lastMS  uint64
	lastHi  uint16
	lastLo  uint64
	nowFunc = time.Now
)

// New returns a fresh id with prefix p.
func New(p Prefix) string {
	hi, lo := next()
	return string(p) + encode(hi, lo)
}

// NewCommand returns a fresh cmd_ id.
func NewCommand() string { return New(Command) }

// NewBatch returns a fresh batch_ id.
func NewBatch() string { return New(Batch) }

// NewNode returns a fresh node_ id.
func NewNode() string { return New(Node) }

// NewTenant returns a fresh tenant_ id.
func NewTenant() string { return New(Tenant) }

// next returns the 128 bits of the next id: hi holds the 48-bit millisecond
// time and the top 16 random bits, lo the low 64.
func next() (hi uint64, lo uint64) {
	genMu.Lock()
	defer genMu.Unlock()
	ms := uint64(nowFunc().UnixMilli()) & (1<<48 - 1)
	if ms <= lastMS {
		// Same (or an earlier, after a clock step) millisecond: count up from
		// the last id so that ids stay strictly increasing in this process.
		ms = lastMS
		lastLo++
		if lastLo == 0 {
			lastHi++
			if lastHi == 0 {
				// 80 bits overflowed in one millisecond: borrow the next one.
				ms++
			}
		}
	} else {
		var b [10]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("ids: crypto/rand failed: %v", err))
		}
		lastHi = binary.BigEndian.Uint16(b[:2])
		// Keep the top bit of the counter clear so that a millisecond has
		// room for 2^63 more ids before it borrows.
		lastLo = binary.BigEndian.Uint64(b[2:]) >> 1
	}
	lastMS = ms
	return ms<<16 | uint64(lastHi), lastLo
}

// encode writes 128 bits as 26 base32 digits, most significant first.
func encode(hi, lo uint64) string {
	var out [bodyLen]byte
	for i := bodyLen - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Parse checks that id has prefix p and a well-formed body, and returns the
// time it was made.
func Parse(p Prefix, id string) (time.Time, error) {
	body, ok := strings.CutPrefix(id, string(p))
	if !ok {
		return time.Time{}, fmt.Errorf("%w: %q does not start with %q", ErrMalformed, id, p)
	}
	if len(body) != bodyLen {
		return time.Time{}, fmt.Errorf("%w: %q: body must be %d characters", ErrMalformed, id, bodyLen)
	}
	var hi, lo uint64
	for i := 0; i < bodyLen; i++ {
		d := strings.IndexByte(alphabet, body[i])
		if d < 0 {
			return time.Time{}, fmt.Errorf("%w: %q: %q is not a base32 digit", ErrMalformed, id, body[i])
		}
		if i == 0 && d > 7 {
			// 26 digits hold 130 bits; the first digit may use only 3.
			return time.Time{}, fmt.Errorf("%w: %q: out of range", ErrMalformed, id)
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(d)
	}
	return time.UnixMilli(int64(hi >> 16)).UTC(), nil
}

// Valid reports whether id is a well-formed id with prefix p.
func Valid(p Prefix, id string) bool {
	_, err := Parse(p, id)
	return err == nil
}
