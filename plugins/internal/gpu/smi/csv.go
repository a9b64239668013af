// Package smi is the one place that runs nvidia-smi and reads its answers,
// for every GPU kind: the inventory's --query-gpu and --query-remapped-rows
// CSV (with [N/A] and [Not Supported] cells), gpu.reset's and diag.dcgm's
// queries and actions (the GPU list, compute processes, persistence mode,
// the reset and the health after it), and nvidia-smi's exit codes (9 driver
// not loaded, 12 NVML missing, 15 a GPU fell off the bus, 255 with "In use
// by another client", ...). The inventory's GPUs come back as partial
// gpu.GPU values that the collector merges with NVML and the kernel's.
package smi

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/better-compute/commands/plugins/internal/gpu"
)

// QueryGPUFields are the --query-gpu fields asked for, in order. All of them
// exist in every driver since R470; a field a driver does not know makes
// nvidia-smi refuse the whole query, so newer fields stay out of this list.
var QueryGPUFields = []string{
	"index",
	"uuid",
	"pci.bus_id",
	"name",
	"driver_version",
	"persistence_mode",
	"mig.mode.current",
	"mig.mode.pending",
	"ecc.mode.current",
	"ecc.mode.pending",
	"ecc.errors.uncorrected.volatile.total",
	"ecc.errors.uncorrected.aggregate.total",
	"pcie.link.gen.current",
	"pcie.link.gen.max",
	"pcie.link.width.current",
	"pcie.link.width.max",
}

// QueryRemappedRowsFields are the --query-remapped-rows fields asked for.
var QueryRemappedRowsFields = []string{
	"gpu_uuid",
	"remapped_rows.correctable",
	"remapped_rows.uncorrectable",
	"remapped_rows.pending",
	"remapped_rows.failure",
}

// ErrMissingColumn matches (errors.Is) a *MissingColumnError.
var ErrMissingColumn = errors.New("nvidia-smi CSV without a column the parser needs")

// MissingColumnError is a --query-gpu CSV without the columns that name a
// GPU (index, uuid, pci.bus_id): no row of it can be well-formed, and the
// error says which column is missing rather than that no row was.
type MissingColumnError struct {
	// Columns are the missing columns.
	Columns []string
}

// Error reads "nvidia-smi --query-gpu CSV has no uuid column, which names a GPU".
func (e *MissingColumnError) Error() string {
	if len(e.Columns) == 1 {
		return "nvidia-smi --query-gpu CSV has no " + e.Columns[0] + " column, which names a GPU"
	}
	return "nvidia-smi --query-gpu CSV has no " + strings.Join(e.Columns, ", ") + " columns, which name a GPU"
}

// Is makes errors.Is(err, ErrMissingColumn) hold.
func (e *MissingColumnError) Is(target error) bool { return target == ErrMissingColumn }

// ErrNoRows is returned when the output holds no well-formed row.
var ErrNoRows = errors.New("no well-formed GPU row")

// Row is one CSV row keyed by field name.
type Row map[string]string

// ReadCSV reads nvidia-smi CSV output. With fields given, the output has no
// header (--format=csv,noheader,nounits) and each row must have exactly that
// many cells; with fields nil, the first line is the header, whose names lose
// their " [unit]" suffix. Rows with the wrong number of cells are counted in
// bad and skipped: nvidia-smi prints errors on stdout too.
func ReadCSV(out []byte, fields []string) (rows []Row, bad int, err error) {
	_, rows, bad, err = readCSV(out, fields)
	return rows, bad, err
}

// readCSV is ReadCSV that also returns the fields: those given, or the
// header's (nil when the output had no header line).
func readCSV(out []byte, fields []string) (_ []string, rows []Row, bad int, err error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.LazyQuotes = true
	r.FieldsPerRecord = -1
	r.ReuseRecord = false
	for {
		rec, rerr := r.Read()
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			var pe *csv.ParseError
			if errors.As(rerr, &pe) {
				bad++
				continue
			}
			return fields, rows, bad, fmt.Errorf("reading nvidia-smi CSV: %w", rerr)
		}
		if fields == nil {
			fields = make([]string, len(rec))
			for i, h := range rec {
				if j := strings.Index(h, " ["); j >= 0 {
					h = h[:j]
				}
				fields[i] = strings.TrimSpace(h)
			}
			continue
		}
		if len(rec) != len(fields) {
			bad++
			continue
		}
		row := make(Row, len(fields))
		for i, f := range fields {
			row[f] = strings.TrimSpace(rec[i])
		}
		rows = append(rows, row)
	}
	return fields, rows, bad, nil
}

// Cell reads one cell: its value, or why there is none. nvidia-smi writes a
// cell it cannot fill as "[N/A]", "[Not Supported]", "[Unknown Error]",
// "[Requested functionality has been deprecated]" (older drivers without the
// brackets).
func Cell(s string) (value string, missing string) {
	s = strings.TrimSpace(s)
	inner := s
	switch {
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		inner = strings.TrimSpace(s[1 : len(s)-1])
	case s == "N/A", s == "Not Supported", s == "", strings.HasPrefix(s, deprecated):
	default:
		return s, ""
	}
	switch strings.ToLower(inner) {
	case "n/a", "":
		return "", "not available on this GPU (nvidia-smi reports [N/A])"
	case "not supported":
		return "", "not supported by this GPU (nvidia-smi reports [Not Supported])"
	default:
		return "", "nvidia-smi reports [" + inner + "]"
	}
}

// bracketed writes a cell without a value as newer drivers print it: "[N/A]".
func bracketed(cell string) string {
	c := strings.TrimSpace(cell)
	if c == "" {
		c = "N/A"
	}
	if !strings.HasPrefix(c, "[") {
		c = "[" + c + "]"
	}
	return c
}

// deprecated starts the cell of a field the driver no longer fills.
const deprecated = "Requested functionality has been deprecated"

// ReadRows reads --format=csv,noheader,nounits output strictly, for the
// answers a command acts on: blank lines and nvidia-smi's notices ("No
// running processes found", "No devices were found") are skipped, and any
// other line without exactly one cell per field is an error, since a partial
// answer must not pass for a healthy one.
func ReadRows(out []byte, fields []string) ([]Row, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.LazyQuotes = true
	r.FieldsPerRecord = -1
	var rows []Row
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading nvidia-smi CSV: %w", err)
		}
		line, _ := r.FieldPos(0)
		if len(rec) == 1 && (strings.HasPrefix(rec[0], "No running") || strings.HasPrefix(rec[0], "No devices")) {
			continue
		}
		if len(rec) != len(fields) {
			return nil, fmt.Errorf("line %d: %d fields, want %d: %q", line, len(rec), len(fields), strings.Join(rec, ","))
		}
		row := make(Row, len(fields))
		for i, f := range fields {
			row[f] = strings.TrimSpace(rec[i])
		}
		rows = append(rows, row)
	}
}

// ParseQueryGPU reads the output of --query-gpu=QueryGPUFields
// --format=csv,noheader,nounits. A row is well-formed when it has every
// cell, an integer index, a GPU- UUID and a bus id; the others are counted
// in bad. It returns ErrNoRows when no row is well-formed.
func ParseQueryGPU(out []byte) (gpus []gpu.GPU, bad int, err error) {
	return parseQueryGPU(out, QueryGPUFields)
}

// ParseQueryGPUWithHeader reads --query-gpu output with its header line
// (--format=csv), with any fields in any order, as captures often are. A
// header without index, uuid or pci.bus_id is a *MissingColumnError.
func ParseQueryGPUWithHeader(out []byte) (gpus []gpu.GPU, bad int, err error) {
	return parseQueryGPU(out, nil)
}

// identityFields are the --query-gpu columns without which no row names a
// GPU: a CSV without one is refused for it, not for its rows.
var identityFields = []string{"index", "uuid", "pci.bus_id"}

func parseQueryGPU(out []byte, fields []string) ([]gpu.GPU, int, error) {
	fields, rows, bad, err := readCSV(out, fields)
	if err != nil {
		return nil, bad, err
	}
	if fields != nil {
		var missing []string
		for _, f := range identityFields {
			if !slices.Contains(fields, f) {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			return nil, bad, &MissingColumnError{Columns: missing}
		}
	}
	var gpus []gpu.GPU
	for _, row := range rows {
		g, ok := gpuFromRow(row)
		if !ok {
			bad++
			continue
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		return nil, bad, ErrNoRows
	}
	return gpus, bad, nil
}

func gpuFromRow(row Row) (gpu.GPU, bool) {
	var g gpu.GPU
	idx, err := strconv.Atoi(row["index"])
	if err != nil || idx < 0 {
		return g, false
	}
	g.Index = idx
	g.UUID = row["uuid"]
	if !strings.HasPrefix(g.UUID, "GPU-") {
		return g, false
	}
	g.BusID = gpu.NormalizeBusID(row["pci.bus_id"])
	if g.BusID == "" {
		return g, false
	}
	g.Name, _ = Cell(row["name"])
	g.DriverVersion, _ = Cell(row["driver_version"])
	g.Seen(gpu.SourceNvidiaSmi)

	if _, present := row["persistence_mode"]; present {
		if b, why := boolCell(row["persistence_mode"]); why == "" {
			g.PersistenceMode = &b
		} else {
			g.Skip(gpu.FieldPersistenceMode, why)
		}
	}
	if _, present := row["mig.mode.current"]; present {
		if b, why := boolCell(row["mig.mode.current"]); why == "" {
			g.MIG = &gpu.MIG{Enabled: b}
			if p, why := boolCell(row["mig.mode.pending"]); why == "" && p != b {
				g.MIG.PendingEnabled = &p
			}
		} else {
			g.Skip(gpu.FieldMIG, why)
		}
	}
	if _, present := row["ecc.mode.current"]; present {
		if b, why := boolCell(row["ecc.mode.current"]); why == "" {
			g.ECC = &gpu.ECC{Enabled: &b}
			if p, why := boolCell(row["ecc.mode.pending"]); why == "" && p != b {
				g.ECC.PendingEnabled = &p
			}
		} else {
			g.Skip(gpu.FieldECCMode, why)
		}
	}
	if _, present := row["ecc.errors.uncorrected.volatile.total"]; present {
		vol, why := uintCell(row["ecc.errors.uncorrected.volatile.total"])
		if why == "" {
			if g.ECC == nil {
				g.ECC = &gpu.ECC{}
			}
			g.ECC.UncorrectableVolatile = &vol
			if agg, why := uintCell(row["ecc.errors.uncorrected.aggregate.total"]); why == "" {
				g.ECC.UncorrectableAggregate = &agg
			}
		} else {
			g.Skip(gpu.FieldECCErrors, why)
		}
	}
	if _, present := row["pcie.link.width.current"]; present {
		cur, why1 := intCell(row["pcie.link.width.current"])
		max, why2 := intCell(row["pcie.link.width.max"])
		if why1 == "" && why2 == "" {
			g.PCIe = &gpu.PCIe{WidthCurrent: cur, WidthMax: max, WidthSamples: []int{cur}}
			g.PCIe.GenCurrent, _ = intCell(row["pcie.link.gen.current"])
			g.PCIe.GenMax, _ = intCell(row["pcie.link.gen.max"])
		} else {
			why := why1
			if why == "" {
				why = why2
			}
			g.Skip(gpu.FieldPCIeLink, why)
		}
	}
	if _, present := row["remapped_rows.pending"]; present {
		if rr, why, _ := remappedFromRow(row); why == "" {
			g.RemappedRows = &rr
		} else {
			g.Skip(gpu.FieldRemappedRows, why)
		}
	}
	return g, true
}

// RemappedRows is one GPU's answer to --query-remapped-rows.
type RemappedRows struct {
	// UUID names the GPU.
	UUID string
	// Rows are the counters, when reported.
	Rows *gpu.RemappedRows
	// Skipped says why they are not, when not.
	Skipped string
	// Cell is what nvidia-smi printed where a counter was missing ("[N/A]").
	Cell string
}

// ParseRemappedRows reads the output of
// --query-remapped-rows=QueryRemappedRowsFields --format=csv,noheader,nounits.
func ParseRemappedRows(out []byte) ([]RemappedRows, int, error) {
	rows, bad, err := ReadCSV(out, QueryRemappedRowsFields)
	if err != nil {
		return nil, bad, err
	}
	var res []RemappedRows
	for _, row := range rows {
		uuid := row["gpu_uuid"]
		if !strings.HasPrefix(uuid, "GPU-") {
			bad++
			continue
		}
		rr, why, cell := remappedFromRow(row)
		r := RemappedRows{UUID: uuid}
		if why == "" {
			r.Rows = &rr
		} else {
			r.Skipped, r.Cell = why, cell
		}
		res = append(res, r)
	}
	if len(res) == 0 {
		return nil, bad, ErrNoRows
	}
	return res, bad, nil
}

// remappedFromRow reads the counters of a row, or why there are none and
// the cell that says so.
func remappedFromRow(row Row) (rr gpu.RemappedRows, why, cell string) {
	cell = row["remapped_rows.correctable"]
	if rr.Correctable, why = intCell(cell); why != "" {
		return rr, why, cell
	}
	cell = row["remapped_rows.uncorrectable"]
	if rr.Uncorrectable, why = intCell(cell); why != "" {
		return rr, why, cell
	}
	cell = row["remapped_rows.pending"]
	if rr.Pending, why = boolCell(cell); why != "" {
		return rr, why, cell
	}
	cell = row["remapped_rows.failure"]
	if rr.Failure, why = boolCell(cell); why != "" {
		return rr, why, cell
	}
	return rr, "", ""
}

func boolCell(s string) (bool, string) {
	v, missing := Cell(s)
	if missing != "" {
		return false, missing
	}
	switch strings.ToLower(v) {
	case "enabled", "yes", "1", "true", "on":
		return true, ""
	case "disabled", "no", "0", "false", "off":
		return false, ""
	}
	return false, fmt.Sprintf("nvidia-smi reports %q, not a yes or no", v)
}

func intCell(s string) (int, string) {
	v, missing := Cell(s)
	if missing != "" {
		return 0, missing
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Sprintf("nvidia-smi reports %q, not a count", v)
	}
	return n, ""
}

func uintCell(s string) (uint64, string) {
	v, missing := Cell(s)
	if missing != "" {
		return 0, missing
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("nvidia-smi reports %q, not a count", v)
	}
	return n, ""
}
