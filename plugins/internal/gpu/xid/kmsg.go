// Package xid reads the kernel log for NVIDIA XID errors: /dev/kmsg records,
// the NVRM Xid and "fallen off the bus" lines in them, the table that says
// what each XID asks of an operator (information, a GPU reset, a reboot), and
// a store that keeps this boot's conditions in a file, because the kernel's
// ring overwrites old lines and an XID must not vanish with them.
package xid

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultKmsgPath is the kernel's record interface.
const DefaultKmsgPath = "/dev/kmsg"

// ErrBadRecord is wrapped by ParseKmsgRecord's errors.
var ErrBadRecord = errors.New("not a kmsg record")

// Record is one /dev/kmsg record: "prio,seq,usec,flags[,…];message", then
// continuation lines, each starting with a space, that carry KEY=value
// dictionary entries.
type Record struct {
	// Priority is the syslog level (0..7); Facility the syslog facility.
	Priority int
	Facility int
	// Seq is the kernel's sequence number, monotonic within a boot.
	Seq uint64
	// Timestamp is the time since boot.
	Timestamp time.Duration
	// Flags is "-" or "c" (continuation of a line split by the printk).
	Flags string
	// Message is the text with the kernel's \xNN escapes undone.
	Message string
	// Dict are the continuation lines' KEY=value entries.
	Dict []string
}

// ParseKmsgRecord parses one record's first line ("6,3964,206764307,-;msg").
func ParseKmsgRecord(line string) (Record, error) {
	var r Record
	line = strings.TrimRight(line, "\n")
	semi := strings.IndexByte(line, ';')
	if semi < 0 {
		return r, fmt.Errorf("%w: no ';' after the header", ErrBadRecord)
	}
	head := strings.Split(line[:semi], ",")
	if len(head) < 4 {
		return r, fmt.Errorf("%w: header %q has fewer than 4 fields", ErrBadRecord, line[:semi])
	}
	pf, err := strconv.ParseUint(head[0], 10, 16)
	if err != nil {
		return r, fmt.Errorf("%w: priority %q", ErrBadRecord, head[0])
	}
	r.Priority, r.Facility = int(pf&7), int(pf>>3)
	if r.Seq, err = strconv.ParseUint(head[1], 10, 64); err != nil {
		return r, fmt.Errorf("%w: sequence %q", ErrBadRecord, head[1])
	}
	usec, err := strconv.ParseUint(head[2], 10, 64)
	if err != nil || usec > uint64(1<<63-1)/uint64(time.Microsecond) {
		return r, fmt.Errorf("%w: timestamp %q", ErrBadRecord, head[2])
	}
	r.Timestamp = time.Duration(usec) * time.Microsecond
	r.Flags = head[3]
	r.Message = unescape(line[semi+1:])
	return r, nil
}

// unescape undoes the kernel's \xNN escapes (it escapes control characters,
// a multi-line printk's newlines among them, and backslashes).
func unescape(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ReadStats says what a read of the kernel log saw.
type ReadStats struct {
	// Records is the number of records read.
	Records int
	// Bad is the number of lines that were not records.
	Bad int
	// Dropped counts the times the kernel said (EPIPE) that the ring had
	// overwritten records before they were read.
	Dropped int
}

// ReadKmsg reads every record available now from path and stops at the end
// (EAGAIN on /dev/kmsg, EOF on a file), never waiting for new ones. It
// works on /dev/kmsg, where each read returns one record, and on a file of
// records, as tests write. fn sees each record in order.
func ReadKmsg(path string, fn func(Record)) (ReadStats, error) {
	var st ReadStats
	// The raw syscalls, not os.File: Go would park a non-blocking read of a
	// pollable character device on its poller instead of returning EAGAIN.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return st, fmt.Errorf("opening kernel log %s: %w", path, err)
	}
	defer syscall.Close(fd)
	p := &recordParser{fn: fn, st: &st}
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(fd, buf)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EPIPE):
			// The ring overwrote records we had not read; the read
			// position moved on to the oldest one left.
			st.Dropped++
			continue
		case errors.Is(err, syscall.EAGAIN):
			p.flush()
			return st, nil
		case err != nil:
			p.flush()
			return st, fmt.Errorf("reading kernel log %s: %w", path, err)
		case n == 0:
			p.flush()
			return st, nil
		}
		p.feed(buf[:n])
	}
}

// recordParser splits a byte stream into records and their continuation lines.
type recordParser struct {
	fn      func(Record)
	st      *ReadStats
	partial []byte
	cur     *Record
}

func (p *recordParser) feed(b []byte) {
	p.partial = append(p.partial, b...)
	for {
		i := indexNewline(p.partial)
		if i < 0 {
			return
		}
		p.line(string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

func (p *recordParser) line(l string) {
	if l == "" {
		return
	}
	if l[0] == ' ' {
		if p.cur != nil {
			p.cur.Dict = append(p.cur.Dict, strings.TrimPrefix(l, " "))
		}
		return
	}
	p.emit()
	r, err := ParseKmsgRecord(l)
	if err != nil {
		p.st.Bad++
		return
	}
	p.cur = &r
}

func (p *recordParser) emit() {
	if p.cur != nil {
		p.st.Records++
		p.fn(*p.cur)
		p.cur = nil
	}
}

func (p *recordParser) flush() {
	if len(p.partial) > 0 {
		p.line(string(p.partial))
		p.partial = nil
	}
	p.emit()
}
