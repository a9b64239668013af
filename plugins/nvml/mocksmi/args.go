package mocksmi

import (
	"errors"
	"fmt"
	"strings"
)

// The queries and actions an Invocation asks for.
const (
	QueryGPU          = "gpu"
	QueryRemappedRows = "remapped-rows"
	QueryComputeApps  = "compute-apps"
	ActionReset       = "reset"
	ActionPersistence = "persistence"
)

// ErrUsage is wrapped by every error of ParseArgs: nvidia-smi answers such
// a command line with exit 2.
var ErrUsage = errors.New("invalid combination of input arguments")

// Invocation is one command line of the forms the GPU kinds run
// (plugins/internal/gpu/smi): a --query-* with --format=csv[,noheader]
// [,nounits], or -pm 0|1, or --gpu-reset (-r), each with an optional
// -i <index|uuid|bus id>.
type Invocation struct {
	// Query is QueryGPU, QueryRemappedRows or QueryComputeApps; "" for an action.
	Query string
	// Fields are the query's fields, in order.
	Fields []string
	// Header prints the CSV header line (no "noheader" in --format).
	Header bool
	// Action is ActionReset or ActionPersistence; "" for a query.
	Action string
	// Persistence is the mode -pm sets.
	Persistence bool
	// Target is -i's GPU: an index, a UUID or a PCI bus id ("" for every GPU).
	Target string
}

// ParseArgs reads a command line. What it does not know it refuses, naming
// the argument, as nvidia-smi does: the mock never answers a question the
// real tool would not.
func ParseArgs(args []string) (Invocation, error) {
	var inv Invocation
	format := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case name == "--query-gpu" || name == "--query-remapped-rows" || name == "--query-compute-apps":
			if inv.Query != "" || inv.Action != "" {
				return inv, usage("%s: one query or action at a time", a)
			}
			inv.Query = map[string]string{"--query-gpu": QueryGPU, "--query-remapped-rows": QueryRemappedRows, "--query-compute-apps": QueryComputeApps}[name]
			if !hasValue || value == "" {
				return inv, usage("%s needs a list of fields (%s=index,uuid)", name, name)
			}
			for _, f := range strings.Split(value, ",") {
				f = strings.TrimSpace(f)
				if f == "" {
					return inv, usage("%s: an empty field in %q", name, value)
				}
				inv.Fields = append(inv.Fields, f)
			}
		case name == "--format":
			if !hasValue {
				return inv, usage("--format needs a value (--format=csv,noheader,nounits)")
			}
			format = value
		case a == "--gpu-reset" || a == "-r":
			if inv.Query != "" || inv.Action != "" {
				return inv, usage("%s: one query or action at a time", a)
			}
			inv.Action = ActionReset
		case a == "-pm" || a == "--persistence-mode":
			if inv.Query != "" || inv.Action != "" {
				return inv, usage("%s: one query or action at a time", a)
			}
			if i+1 >= len(args) {
				return inv, usage("%s needs 0 or 1", a)
			}
			i++
			switch args[i] {
			case "0", "DISABLED", "disabled":
			case "1", "ENABLED", "enabled":
				inv.Persistence = true
			default:
				return inv, usage("%s %q: want 0 or 1", a, args[i])
			}
			inv.Action = ActionPersistence
		case a == "-i" || a == "--id":
			if i+1 >= len(args) || strings.TrimSpace(args[i+1]) == "" {
				return inv, usage("%s needs a GPU: an index, a UUID or a PCI bus id", a)
			}
			if inv.Target != "" {
				return inv, usage("%s given twice", a)
			}
			i++
			inv.Target = strings.TrimSpace(args[i])
		case name == "--id":
			if strings.TrimSpace(value) == "" {
				return inv, usage("--id needs a GPU: an index, a UUID or a PCI bus id")
			}
			inv.Target = strings.TrimSpace(value)
		default:
			return inv, usage("unknown argument %q", a)
		}
	}
	switch {
	case inv.Query == "" && inv.Action == "":
		return inv, usage("no query or action: the mock answers --query-gpu, --query-remapped-rows, --query-compute-apps, -pm and --gpu-reset")
	case inv.Query != "" && format == "":
		return inv, usage("--query-* needs --format=csv")
	case inv.Query == "" && format != "":
		return inv, usage("--format goes with a --query-*")
	case inv.Action != "" && inv.Target == "":
		return inv, usage("the mock changes one GPU at a time: give -i <GPU>")
	}
	if format != "" {
		inv.Header = true
		for i, opt := range strings.Split(format, ",") {
			switch opt = strings.TrimSpace(opt); {
			case i == 0 && opt == "csv":
			case i > 0 && opt == "noheader":
				inv.Header = false
			case i > 0 && opt == "nounits":
			default:
				return inv, usage("--format=%s: want csv, then noheader or nounits", format)
			}
		}
	}
	return inv, nil
}

func usage(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}
