package wipe

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// metadata removes every signature wipefs knows (filesystems, partition
// tables, RAID and LVM labels, wherever on the disk they sit), then zeroes
// the first and last MiB, where the partition tables and the superblocks
// that wipefs may not know live.
func (w *wiper) metadata(ctx context.Context) error {
	w.version(ctx, "wipefs")
	// --force: this process holds the exclusive open, which wipefs would
	// otherwise ask for itself and be refused.
	out, err := w.tool(ctx, 2*time.Minute, "wipefs", "--all", "--force", w.req.Device)
	if err != nil {
		return err
	}
	var erased []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			erased = append(erased, l)
		}
	}
	w.res.PostState["signaturesErased"] = erased
	regions := metadataRegions(w.res.Device.SizeBytes)
	w.res.Method.Parameters["zeroedRegions"] = regions
	var n int64
	for _, r := range regions {
		written, err := w.zero(ctx, r[0], r[1], nil)
		n += written
		if err != nil {
			return err
		}
	}
	w.res.PostState["bytesZeroed"] = n
	return nil
}

// overwrite writes zeros over the whole device, one pass.
func (w *wiper) overwrite(ctx context.Context) error {
	size := w.res.Device.SizeBytes
	w.res.Method.Parameters["pattern"] = "zeros"
	w.res.Method.Parameters["passes"] = 1
	n, err := w.zero(ctx, 0, size, func(done int64) {
		w.d.Progress(int(done*100/size), fmt.Sprintf("zeroed %d of %d bytes", done, size))
	})
	w.res.PostState["bytesWritten"] = n
	return err
}

// zero writes zeros over [start, end) and syncs; it stops between chunks
// when ctx ends, reporting how much it wrote.
func (w *wiper) zero(ctx context.Context, start, end int64, progress func(int64)) (int64, error) {
	const chunk = 4 << 20
	buf := make([]byte, chunk)
	var done int64
	lastReport := time.Now()
	for off := start; off < end; {
		if err := ctx.Err(); err != nil {
			return done, &Error{Reason: ReasonIO, Err: fmt.Errorf("stopped after zeroing %d bytes: %w", done, err)}
		}
		n := min(int64(chunk), end-off)
		m, err := w.f.WriteAt(buf[:n], off)
		done += int64(m)
		if err != nil {
			return done, &Error{Reason: ReasonIO, Err: fmt.Errorf("writing at %d: %w", off, err)}
		}
		off += int64(m)
		if progress != nil && time.Since(lastReport) > time.Second {
			progress(off - start)
			lastReport = time.Now()
		}
	}
	if err := w.f.Sync(); err != nil {
		return done, &Error{Reason: ReasonIO, Err: fmt.Errorf("sync: %w", err)}
	}
	return done, nil
}
