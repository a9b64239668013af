package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ReloadReport says what a Reload changed.
type ReloadReport struct {
	// Started are the plugins started anew: a file that is new, or changed
	// (another inode, size, mtime or ctime, or another pin).
	Started []string
	// Kept are the plugins whose file and pin did not change: the running
	// process serves on, untouched.
	Kept []string
	// Retired are the plugins a reload replaced or whose file is gone: each
	// finishes the commands it runs on the old process, then stops.
	Retired []string
	// Refused are the files the reload refused. A refused replacement of a
	// running plugin leaves that plugin serving its old version (named in
	// Kept): a bad file takes nothing down.
	Refused []Refusal
}

// Reload reads the plugin directory again, with pins as the SHA-256 pins
// from now on, and moves new commands to what it holds: a new or changed
// binary is started, and once it loaded its kinds route to it; an unchanged
// one keeps its process; a replaced or removed one is retired, finishing
// the commands already running on its old process before it stops. The
// kinds served can change (Manifests reads the new set): bcd reports them
// to the control plane in its next Hello.
//
// The error joins the refusals, as Start's does; what loaded serves either
// way. Reload waits for the new plugins' start, not for the retired ones'
// commands.
func (h *Host) Reload(ctx context.Context, pins map[string]string) (ReloadReport, error) {
	if !h.started.Load() {
		return ReloadReport{}, errors.New("plugin host not started")
	}
	return h.load(ctx, pins)
}

// slot is one binary of a load: the instance that ran it before (if any)
// and the one that serves it from now on.
type slot struct {
	name  string
	old   *instance
	next  *instance
	fresh bool
	err   error
}

// load discovers the directory and makes what it holds the current
// generation. Start is the first load (nothing runs yet); Reload the others.
func (h *Host) load(ctx context.Context, pins map[string]string) (ReloadReport, error) {
	h.reloadLock.Lock()
	defer h.reloadLock.Unlock()
	var rep ReloadReport
	select {
	case <-h.closed:
		return rep, ErrClosed
	default:
	}
	bins, refusals := discover(h.logger, h.cfg.Dir, pins)

	h.kindsLock.RLock()
	current := make(map[string]*instance, len(h.instances))
	for _, in := range h.instances {
		current[in.bin.name] = in
	}
	h.kindsLock.RUnlock()

	// One slot per name: each binary found, and each running plugin whose
	// new file was refused (it keeps serving its old version).
	slots := make([]*slot, 0, len(bins))
	var wg sync.WaitGroup
	for _, b := range bins {
		sl := &slot{name: b.name, old: current[b.name]}
		slots = append(slots, sl)
		if sl.old != nil && sl.old.bin.same(b) && sl.old.serving() {
			sl.next = sl.old
			continue
		}
		sl.next, sl.fresh = newInstance(h, b), true
		wg.Go(func() { sl.err = sl.next.start(ctx) })
	}
	for _, r := range refusals {
		if old := current[r.Plugin]; r.Plugin != "" && old != nil && old.serving() {
			slots = append(slots, &slot{name: r.Plugin, old: old, next: old})
		}
	}
	wg.Wait()
	sort.Slice(slots, func(i, j int) bool { return slots[i].name < slots[j].name })

	kinds := map[string]route{}
	var insts, started []*instance
	for _, sl := range slots {
		in := sl.next
		if sl.err != nil {
			h.logger.Error("refusing plugin", "plugin", sl.name, "error", sl.err)
			refusals = append(refusals, Refusal{Plugin: sl.name, Err: sl.err})
			if sl.old == nil || !sl.old.serving() {
				continue
			}
			in, sl.fresh = sl.old, false
		}
		if !sl.fresh {
			if h.isRefused(refusals, sl.name) {
				h.logger.Warn("keeping the running version of a plugin whose new file was refused", "plugin", sl.name)
			}
			rep.Kept = append(rep.Kept, sl.name)
		}
		var dup error
		for _, m := range in.manifests {
			if other, ok := kinds[m.Kind]; ok {
				dup = fmt.Errorf("%w: kind %s is claimed by both %s and %s; %s is stopped", ErrRefused, m.Kind, other.inst.bin.name, in.bin.name, in.bin.name)
				break
			}
		}
		if dup != nil {
			h.logger.Error("refusing plugin", "plugin", in.bin.name, "error", dup)
			refusals = append(refusals, Refusal{Plugin: in.bin.name, Err: dup})
			if sl.fresh {
				in.close()
			}
			continue
		}
		for _, m := range in.manifests {
			kinds[m.Kind] = route{manifest: m, inst: in}
		}
		insts = append(insts, in)
		if sl.fresh {
			started = append(started, in)
			rep.Started = append(rep.Started, in.bin.name)
		}
	}
	sort.Slice(refusals, func(i, j int) bool { return refusals[i].Plugin < refusals[j].Plugin })
	for i := range refusals {
		refusals[i] = classify(refusals[i], h.cfg.Dir, pins)
	}
	rep.Refused = refusals

	keep := make(map[*instance]bool, len(insts))
	for _, in := range insts {
		keep[in] = true
	}
	var retired []*instance
	h.kindsLock.Lock()
	for _, in := range h.instances {
		if !keep[in] {
			retired = append(retired, in)
		}
	}
	h.kinds, h.instances, h.refused, h.pins = kinds, insts, refusals, pins
	for _, in := range started {
		h.live[in] = struct{}{}
	}
	h.kindsLock.Unlock()

	for _, in := range started {
		h.logger.Info("plugin loaded", "plugin", in.bin.name, "kinds", strings.Join(kindNames(in.manifests), ","),
			"protocol", in.protocol, "sdk_version", in.sdkVersion)
	}
	for _, in := range retired {
		rep.Retired = append(rep.Retired, in.bin.name)
		h.logger.Info("plugin retired: it finishes the commands it runs, then stops", "plugin", in.bin.name, "running", in.inflight.Load())
		in.retire()
	}
	// Close may have run during the load: close what this load started.
	select {
	case <-h.closed:
		for _, in := range started {
			h.closeRetired(in)
		}
	default:
	}
	errs := make([]error, 0, len(refusals))
	for _, r := range refusals {
		errs = append(errs, r.Err)
	}
	return rep, errors.Join(errs...)
}

// isRefused reports whether refusals name the plugin.
func (h *Host) isRefused(refusals []Refusal, name string) bool {
	for _, r := range refusals {
		if r.Plugin == name {
			return true
		}
	}
	return false
}

// closeRetired closes an instance that no longer serves new commands and
// forgets it. Safe to call more than once.
func (h *Host) closeRetired(in *instance) {
	in.close()
	h.kindsLock.Lock()
	delete(h.live, in)
	h.kindsLock.Unlock()
}

// serving reports whether in may go on serving: not closing, not retired.
func (in *instance) serving() bool {
	if in.retired.Load() {
		return false
	}
	in.procLock.Lock()
	defer in.procLock.Unlock()
	return !in.closing
}
