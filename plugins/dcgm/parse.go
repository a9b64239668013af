package dcgm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The statuses a TestResult carries, whatever casing DCGM printed.
const (
	StatusPass = "pass"
	StatusFail = "fail"
	StatusWarn = "warn"
	StatusSkip = "skip"
	// StatusUnknown is a status word this parser does not know; it counts as
	// neither a pass nor a failure, and Raw keeps the word.
	StatusUnknown = "unknown"
)

// The JSON shapes ParseDiag recognises, as Report.Shape names them.
const (
	// ShapeDCGM3 nests under "DCGM GPU Diagnostic" -> test_categories -> tests.
	ShapeDCGM3 = "dcgm3"
	// ShapeDCGM4 has the tests elsewhere: at the top level, or under
	// "DCGM Diagnostic".
	ShapeDCGM4 = "dcgm4"
)

// ErrUnknownShape is wrapped by ParseDiag's error for JSON of neither DCGM
// 3's nor DCGM 4's shape; the error names the shape it found.
var ErrUnknownShape = errors.New("dcgmi diag JSON of neither DCGM 3's nor DCGM 4's shape")

// ErrNoResults is returned by ParseDiag for JSON that holds no test.
var ErrNoResults = errors.New("no test results in dcgmi's JSON")

// TestResult is one test's verdict on one GPU, or on the node when GPU is nil
// (DCGM's deployment tests name no GPU).
type TestResult struct {
	Category string `json:"category,omitempty"`
	Test     string `json:"test"`
	// GPU is DCGM's GPU id, which follows NVML's index.
	GPU *int `json:"gpu,omitempty"`
	// UUID is filled in by the handler from the inventory.
	UUID   string `json:"uuid,omitempty"`
	Status string `json:"status"`
	// Raw is the status word as DCGM printed it.
	Raw      string   `json:"raw,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Errors are the errors DCGM attached to the result (DCGM 4).
	Errors []string `json:"errors,omitempty"`
	Info   []string `json:"info,omitempty"`
}

// Report is a parsed `dcgmi diag -j`.
type Report struct {
	Shape string `json:"shape"`
	// Version is the DCGM version the JSON names, when it does.
	Version string       `json:"version,omitempty"`
	Results []TestResult `json:"results"`
	// Errors are run-level errors DCGM reported ("runtime_error").
	Errors []string `json:"errors,omitempty"`
}

// Overall is fail when any result failed or DCGM reported a run error, warn
// when any warned, else pass.
func (r Report) Overall() string {
	overall := StatusPass
	if len(r.Errors) > 0 {
		return StatusFail
	}
	for _, t := range r.Results {
		switch t.Status {
		case StatusFail:
			return StatusFail
		case StatusWarn:
			overall = StatusWarn
		}
	}
	return overall
}

// ParseDiag reads `dcgmi diag -r N -j` output leniently within a known
// shape: NVIDIA says the schema is not stable, and it differs between DCGM 3
// and 4, but a document of neither shape is refused (ErrUnknownShape) rather
// than searched for tests. Text before the first "{" (a warning dcgmi
// printed) and after the document is ignored. Within the shape's part, any
// object with a "tests" array is read as tests, with the category of the
// nearest enclosing object that names one; a result names its GPUs by
// gpu_ids ("0,1", 0 or [0,1]), gpu_id or entity_id; statuses are matched
// without regard to case ("Pass", "PASS", "pass", "SKIPPED", "Skip").
func ParseDiag(b []byte) (Report, error) {
	i := bytes.IndexByte(b, '{')
	if i < 0 {
		return Report{}, fmt.Errorf("dcgmi diag output holds no JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b[i:]))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return Report{}, fmt.Errorf("dcgmi diag JSON: %w", err)
	}
	shape, body, err := shapeOf(root)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Shape: shape}
	rep.Version = findVersion(root, 0)
	walk(&rep, body, "", 0)
	if len(rep.Results) == 0 && len(rep.Errors) == 0 {
		return rep, ErrNoResults
	}
	return rep, nil
}

// The keys that tell the shapes apart.
const (
	keyDCGM3       = "DCGM GPU Diagnostic"
	keyDCGM4       = "DCGM Diagnostic"
	keyTests       = "tests"
	keyCategories  = "test_categories"
	describeShapes = `neither DCGM 3's "DCGM GPU Diagnostic" nor DCGM 4's "tests" or "DCGM Diagnostic"`
)

// shapeOf recognises the document's shape and returns the part of it that
// holds the tests: DCGM 3's "DCGM GPU Diagnostic" object (with its
// test_categories list), DCGM 4's top-level "tests" list, or DCGM 4's
// "DCGM Diagnostic" object. Anything else wraps ErrUnknownShape with what it
// found, so that passing tests found elsewhere in a malformed document never
// pass for a diagnostic.
func shapeOf(root map[string]any) (string, any, error) {
	v3, has3 := root[keyDCGM3]
	tests, hasTests := root[keyTests]
	v4, has4 := root[keyDCGM4]
	switch {
	case has3 && (hasTests || has4):
		other := keyTests
		if has4 {
			other = keyDCGM4
		}
		return "", nil, fmt.Errorf("%w: both DCGM 3's %q and DCGM 4's %q", ErrUnknownShape, keyDCGM3, other)
	case has3:
		obj, ok := v3.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("%w: %q is %s, not DCGM 3's object of %s", ErrUnknownShape, keyDCGM3, kindOf(v3), keyCategories)
		}
		if c, ok := obj[keyCategories]; ok {
			if _, list := c.([]any); !list {
				return "", nil, fmt.Errorf("%w: %q.%s is %s, not a list", ErrUnknownShape, keyDCGM3, keyCategories, kindOf(c))
			}
		}
		return ShapeDCGM3, obj, nil
	case hasTests && has4:
		return "", nil, fmt.Errorf("%w: both DCGM 4's %q and %q", ErrUnknownShape, keyTests, keyDCGM4)
	case hasTests:
		if _, list := tests.([]any); !list {
			return "", nil, fmt.Errorf("%w: %q is %s, not DCGM 4's list of tests", ErrUnknownShape, keyTests, kindOf(tests))
		}
		return ShapeDCGM4, root, nil
	case has4:
		obj, ok := v4.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("%w: %q is %s, not DCGM 4's object", ErrUnknownShape, keyDCGM4, kindOf(v4))
		}
		return ShapeDCGM4, obj, nil
	}
	keys := sortedKeys(root)
	for i, k := range keys {
		keys[i] = strconv.Quote(k)
	}
	if len(keys) == 0 {
		return "", nil, fmt.Errorf("%w: an empty object: %s", ErrUnknownShape, describeShapes)
	}
	return "", nil, fmt.Errorf("%w: top-level keys %s: %s", ErrUnknownShape, strings.Join(keys, ", "), describeShapes)
}

// kindOf names a JSON value's kind for an error: "an array", "a string".
func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// maxDepth bounds the walk: fuzzed input can nest deeply.
const maxDepth = 64

func walk(rep *Report, node any, category string, depth int) {
	if depth > maxDepth {
		return
	}
	switch n := node.(type) {
	case []any:
		for _, el := range n {
			walk(rep, el, category, depth+1)
		}
	case map[string]any:
		if c, ok := str(n["category"]); ok {
			category = c
		}
		for _, k := range []string{"runtime_error", "runtimeError", "error"} {
			if e, ok := str(n[k]); ok && e != "" {
				rep.Errors = append(rep.Errors, e)
			}
		}
		if tests, ok := n["tests"].([]any); ok {
			for _, t := range tests {
				if tm, ok := t.(map[string]any); ok {
					readTest(rep, tm, category)
				}
			}
		}
		for _, k := range sortedKeys(n) {
			if k == "tests" {
				continue
			}
			walk(rep, n[k], category, depth+1)
		}
	}
}

func readTest(rep *Report, t map[string]any, category string) {
	name := firstStr(t, "name", "test_name", "testName", "test")
	if c, ok := str(t["category"]); ok {
		category = c
	}
	results, _ := t["results"].([]any)
	n := 0
	for _, r := range results {
		rm, ok := r.(map[string]any)
		if !ok {
			continue
		}
		n++
		raw := statusWord(rm["status"])
		base := TestResult{
			Category: category, Test: name, Status: normStatus(raw), Raw: raw,
			Warnings: messages(rm, "warnings", "warning"),
			Errors:   messages(rm, "errors"),
			Info:     messages(rm, "info"),
		}
		gpus := gpuIDs(rm)
		if len(gpus) == 0 {
			rep.Results = append(rep.Results, base)
			continue
		}
		for _, g := range gpus {
			tr := base
			tr.GPU = &g
			rep.Results = append(rep.Results, tr)
		}
	}
	if n > 0 {
		return
	}
	// A test without per-result entries: its own or its summary's status.
	raw := statusWord(t["status"])
	if raw == "" {
		if sum, ok := t["test_summary"].(map[string]any); ok {
			raw = statusWord(sum["status"])
		}
	}
	if raw != "" || name != "" {
		rep.Results = append(rep.Results, TestResult{Category: category, Test: name, Status: normStatus(raw), Raw: raw, Warnings: messages(t, "warnings", "warning"), Info: messages(t, "info")})
	}
}

// statusWord reads a status given as a string or as {"status": "..."}.
func statusWord(v any) string {
	switch s := v.(type) {
	case string:
		return strings.TrimSpace(s)
	case map[string]any:
		return statusWord(s["status"])
	}
	return ""
}

func normStatus(raw string) string {
	w := strings.ToLower(strings.TrimSpace(raw))
	w = strings.NewReplacer("_", " ", "-", " ").Replace(w)
	switch w {
	case "pass", "passed", "ok", "success":
		return StatusPass
	case "fail", "failed", "failure", "error":
		return StatusFail
	case "warn", "warning", "warned":
		return StatusWarn
	case "skip", "skipped", "not run", "notrun", "not applicable":
		return StatusSkip
	}
	return StatusUnknown
}

// gpuIDs reads the GPUs a result names.
func gpuIDs(r map[string]any) []int {
	if v, ok := r["gpu_ids"]; ok {
		return ints(v)
	}
	if v, ok := r["gpu_id"]; ok {
		return ints(v)
	}
	if v, ok := r["entity_id"]; ok {
		if g, ok := str(r["entity_group"]); ok && !strings.EqualFold(g, "gpu") {
			return nil
		}
		return ints(v)
	}
	return nil
}

func ints(v any) []int {
	var out []int
	switch x := v.(type) {
	case json.Number:
		if n, err := strconv.Atoi(x.String()); err == nil && n >= 0 {
			out = append(out, n)
		}
	case string:
		for _, f := range strings.FieldsFunc(x, func(r rune) bool { return r == ',' || r == ' ' }) {
			if n, err := strconv.Atoi(f); err == nil && n >= 0 {
				out = append(out, n)
			}
		}
	case []any:
		for _, el := range x {
			if _, nested := el.([]any); nested {
				continue
			}
			out = append(out, ints(el)...)
		}
	}
	return out
}

// messages reads warnings or info given as a string, a list of strings, or
// a list of objects ({"warning": "...", "error_id": 7}, {"message": "..."}).
func messages(m map[string]any, keys ...string) []string {
	var out []string
	for _, k := range keys {
		out = append(out, msgs(m[k])...)
	}
	return out
}

func msgs(v any) []string {
	switch x := v.(type) {
	case string:
		if s := strings.TrimSpace(x); s != "" {
			return []string{s}
		}
	case []any:
		var out []string
		for _, el := range x {
			switch e := el.(type) {
			case string:
				out = append(out, msgs(e)...)
			case map[string]any:
				if s := firstStr(e, "warning", "message", "msg", "info", "error"); s != "" {
					out = append(out, s)
				}
			}
		}
		return out
	case map[string]any:
		if s := firstStr(x, "warning", "message", "msg", "info", "error"); s != "" {
			return []string{s}
		}
	}
	return nil
}

func findVersion(n map[string]any, depth int) string {
	if depth > 3 {
		return ""
	}
	if s := firstStr(n, "DCGM Version", "dcgm_version", "dcgmVersion", "version", "Version"); s != "" {
		return s
	}
	for _, k := range sortedKeys(n) {
		if sub, ok := n[k].(map[string]any); ok {
			if s := findVersion(sub, depth+1); s != "" {
				return s
			}
		}
	}
	return ""
}

func firstStr(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := str(m[k]); ok && s != "" {
			return s
		}
	}
	return ""
}

func str(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return strings.TrimSpace(s), true
	case json.Number:
		return s.String(), true
	}
	return "", false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
