package inuse

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu/smi"
)

// Holder is a process with a GPU's device node (/dev/nvidiaN) open.
type Holder struct {
	PID    int    `json:"pid"`
	Comm   string `json:"comm,omitempty"`
	Device string `json:"device"`
	// GPU is the UUID of the GPU behind the device node, "" when unknown.
	GPU string `json:"gpu,omitempty"`
}

// Minors maps device minor numbers to GPU UUIDs from the driver's
// <procRoot>/driver/nvidia/gpus/*/information files ("Device Minor: 0",
// "GPU UUID: GPU-…"). Missing files give an empty map.
func Minors(procRoot string) map[int]string {
	out := map[int]string{}
	files, _ := filepath.Glob(filepath.Join(procRoot, "driver", "nvidia", "gpus", "*", "information"))
	for _, f := range files {
		minor, uuid := -1, ""
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "Device Minor":
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					minor = n
				}
			case "GPU UUID":
				uuid = strings.TrimSpace(v)
			}
		}
		_ = fh.Close()
		if minor >= 0 && uuid != "" {
			out[minor] = uuid
		}
	}
	return out
}

// ScanOptions tune ScanHolders.
type ScanOptions struct {
	// Minors maps device minors to GPU UUIDs (see Minors). A minor it lacks
	// is looked up in ByIndex, since minors follow the GPU index on most
	// systems.
	Minors  map[int]string
	ByIndex map[int]string
	// IgnoreComm names processes that hold GPUs by design and are not a
	// workload (nv-hostengine for a DCGM diagnostic).
	IgnoreComm []string
	// SkipPID is left out (this process).
	SkipPID int
}

// ScanHolders walks <procRoot>/[0-9]*/fd for links to /dev/nvidia<N> (the
// per-GPU nodes; nvidiactl and nvidia-uvm name no GPU). Processes that
// vanish or cannot be read are skipped: bcd runs as root, where every fd
// directory is readable.
func ScanHolders(procRoot string, opt ScanOptions) []Holder {
	var out []Holder
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == opt.SkipPID {
			continue
		}
		comm := ""
		if b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm")); err == nil {
			comm = strings.TrimSpace(string(b))
		}
		if ignored(comm, opt.IgnoreComm) {
			continue
		}
		fdDir := filepath.Join(procRoot, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			minor, ok := deviceMinor(target)
			if !ok || seen[target] {
				continue
			}
			seen[target] = true
			uuid, ok := opt.Minors[minor]
			if !ok {
				uuid = opt.ByIndex[minor]
			}
			out = append(out, Holder{PID: pid, Comm: comm, Device: target, GPU: uuid})
		}
	}
	return out
}

func ignored(comm string, names []string) bool {
	for _, n := range names {
		if comm == n {
			return true
		}
	}
	return false
}

// deviceMinor reads N from "/dev/nvidiaN".
func deviceMinor(target string) (int, bool) {
	rest, ok := strings.CutPrefix(target, "/dev/nvidia")
	if !ok || rest == "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Processes finds the processes that use gpus: compute contexts that
// nvidia-smi reports, and device nodes open under procRoot (byIndex maps
// GPU indices to UUIDs for minors the driver does not map). Processes whose
// name is in ignoreComm are left out. It returns one reason per finding,
// nil when none uses them; an error when nvidia-smi does not answer, since
// then a process cannot be ruled out.
func Processes(ctx context.Context, r smi.Tool, procRoot string, byIndex map[int]string, ignoreComm []string, gpus []string) ([]string, error) {
	apps, err := r.QueryComputeApps(ctx)
	if err != nil {
		return nil, fmt.Errorf("querying compute processes: %w", err)
	}
	holders := ScanHolders(procRoot, ScanOptions{
		Minors:     Minors(procRoot),
		ByIndex:    byIndex,
		IgnoreComm: ignoreComm,
		SkipPID:    os.Getpid(),
	})
	return Reasons(Input{Apps: apps, Holders: holders}, gpus), nil
}
