// Package checkreport prints a diagnostic result (diag.nvml, diag.dcgm: a list
// of checks with a status, a reason and an action) as a readable table, for
// bcd exec and the better-compute CLI alike.
package checkreport

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// checkReport is the shape diagnostics share: a list of checks, each with a
// status and the words an operator acts on (diag.nvml, diag.dcgm).
type checkReport struct {
	Status string `json:"status"`
	Checks []struct {
		Check string `json:"check"`
		GPU   *struct {
			Index int    `json:"index"`
			UUID  string `json:"uuid"`
			BusID string `json:"busId"`
		} `json:"gpu"`
		Status string `json:"status"`
		Reason string `json:"reason"`
		Action string `json:"action"`
	} `json:"checks"`
}

// Write prints a result that holds checks as a readable table; it
// prints nothing for other results and reports whether it printed.
func Write(w io.Writer, result json.RawMessage) bool {
	var r checkReport
	if len(result) == 0 || json.Unmarshal(result, &r) != nil || len(r.Checks) == 0 {
		return false
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tGPU\tSTATUS\tREASON")
	failed := 0
	for _, c := range r.Checks {
		gpu := "-"
		if c.GPU != nil {
			gpu = fmt.Sprintf("%d %s", c.GPU.Index, c.GPU.BusID)
		}
		status := strings.ToUpper(c.Status)
		if c.Status == "fail" {
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Check, gpu, status, c.Reason)
	}
	_ = tw.Flush()
	if failed > 0 {
		fmt.Fprintln(w, "\nWhat to do:")
		for _, c := range r.Checks {
			if c.Status == "fail" && c.Action != "" {
				uuid := ""
				if c.GPU != nil {
					uuid = " " + c.GPU.UUID
				}
				fmt.Fprintf(w, "  %s%s: %s\n", c.Check, uuid, c.Action)
			}
		}
	}
	if r.Status != "" {
		fmt.Fprintf(w, "overall: %s (%d of %d checks failed)\n", strings.ToUpper(r.Status), failed, len(r.Checks))
	}
	return true
}
