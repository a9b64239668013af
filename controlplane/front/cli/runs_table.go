package cli

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// failuresShown bounds the failures a run's report lists; runs targets
// --state failures --all lists them all.
const failuresShown = 1000

// requesterText is who asked and how: "alice (api)", "ops (fleet-run
// run_…)", "health (module:health)".
func requesterText(requester, via, runID string) string {
	if requester == "" {
		return "-"
	}
	switch {
	case via == "fleet-run" && runID != "":
		return requester + " (fleet-run " + runID + ")"
	case via != "":
		return requester + " (" + via + ")"
	}
	return requester
}

// targetsText says what a run's targets select.
func targetsText(t *apiv1.FleetRunTargets) string {
	var parts []string
	if t.GetAll() {
		parts = append(parts, "all nodes")
	}
	if n := len(t.GetNodeIds()); n > 0 {
		ids := strings.Join(t.GetNodeIds()[:min(n, 5)], ",")
		if n > 5 {
			ids += fmt.Sprintf(",… (%d)", n)
		}
		parts = append(parts, "nodes "+ids)
	}
	if t.GetPool() != "" {
		parts = append(parts, "pool "+t.GetPool())
	}
	if t.GetSelector() != "" {
		parts = append(parts, "selector "+t.GetSelector())
	}
	if len(t.GetConditions()) > 0 {
		parts = append(parts, "conditions "+strings.Join(t.GetConditions(), ","))
	}
	return dash(strings.Join(parts, "; "))
}

// runTable prints one run, a line a field.
func (a *app) runTable(r *apiv1.FleetRun) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	c := r.GetCounts()
	state := r.GetState()
	if r.GetStateReason() != "" {
		state += " (" + r.GetStateReason() + ")"
	}
	fmt.Fprintf(w, "RUN\t%s\n", r.GetId())
	fmt.Fprintf(w, "KIND\t%s\n", r.GetKind())
	fmt.Fprintf(w, "STATE\t%s\n", state)
	if r.GetStateMessage() != "" {
		fmt.Fprintf(w, "MESSAGE\t%s\n", r.GetStateMessage())
	}
	if r.GetWaitingReason() != "" {
		fmt.Fprintf(w, "WAITING FOR\t%s: %s\n", r.GetWaitingReason(), r.GetWaitingMessage())
	}
	fmt.Fprintf(w, "TARGETS\t%d (%s)\n", c.GetTargets(), targetsText(r.GetTargets()))
	fmt.Fprintf(w, "PROGRESS\t%s\n", progressSummary(r))
	if len(c.GetByReason()) > 0 {
		fmt.Fprintf(w, "REASONS\t%s\n", countsText(c.GetByReason()))
	}
	fmt.Fprintf(w, "LIMITS\tconcurrency %d (maxConcurrency %s), errors %d (maxErrors %s), notAfter %ds\n", r.GetConcurrencyLimit(), r.GetMaxConcurrency(),
		r.GetErrorLimit(), r.GetMaxErrors(), r.GetNotAfterSeconds())
	if r.GetBatchId() != "" {
		fmt.Fprintf(w, "BATCH\t%s (better-compute batch get %s)\n", r.GetBatchId(), r.GetBatchId())
	}
	fmt.Fprintf(w, "REQUESTER\t%s\n", requesterText(r.GetRequester(), r.GetRequestedVia(), ""))
	if r.GetReason() != "" {
		fmt.Fprintf(w, "REASON\t%s\n", r.GetReason())
	}
	fmt.Fprintf(w, "CREATED\t%s\n", stampOrDash(r.GetCreatedAt()))
	fmt.Fprintf(w, "STARTED\t%s\n", stampOrDash(r.GetStartedAt()))
	fmt.Fprintf(w, "FINISHED\t%s\n", stampOrDash(r.GetFinishedAt()))
	return w.Flush()
}

// runReport prints the run, then its failures (read with
// fleetRuns.listTargets) and its refused targets.
func (a *app) runReport(cmd *cobra.Command, r *apiv1.FleetRun) error {
	if err := a.runTable(r); err != nil {
		return err
	}
	if n := r.GetCounts().GetFailures(); n > 0 {
		resp, err := a.call(cmd, "fleetRuns.listTargets", []string{"tenantId=" + r.GetTenantId(), "runId=" + r.GetId(), "state=failures",
			fmt.Sprintf("limit=%d", failuresShown)})
		if err != nil {
			return err
		}
		fmt.Fprintf(a.env.Stdout, "\nFAILURES (%d)\n", n)
		w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NODE\tSTATE\tREASON\tCOMMAND\tMESSAGE")
		for _, t := range resp.(*apiv1.ListFleetRunTargetsResponse).GetItems() {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.GetNodeId(), t.GetState(), dash(t.GetReason()), dash(t.GetCommandId()), dash(t.GetMessage()))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if int(n) > failuresShown {
			fmt.Fprintf(a.env.Stdout, "… %d more: better-compute runs targets %s --state failures --all\n", int(n)-failuresShown, r.GetId())
		}
	}
	if n := r.GetCounts().GetRefused(); n > 0 {
		fmt.Fprintf(a.env.Stdout, "\nREFUSED (%d)\n", n)
		w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NODE\tREASON\tMESSAGE")
		for _, t := range r.GetRefused() {
			fmt.Fprintf(w, "%s\t%s\t%s\n", t.GetNodeId(), dash(t.GetReason()), dash(t.GetMessage()))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if int(n) > len(r.GetRefused()) {
			fmt.Fprintf(a.env.Stdout, "… %d more: better-compute runs targets %s --state refused --all\n", int(n)-len(r.GetRefused()), r.GetId())
		}
	}
	return nil
}

// runListTable prints one line a run.
func (a *app) runListTable(runs []*apiv1.FleetRun) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tKIND\tSTATE\tTARGETS\tSUCCEEDED\tFAILURES\tSTARTED\tWAITING\tREQUESTER\tCREATED")
	for _, r := range runs {
		c := r.GetCounts()
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.GetId(), r.GetKind(), r.GetState(), c.GetTargets(), c.GetSucceeded(),
			c.GetFailures(), c.GetStarted(), c.GetWaiting(), requesterText(r.GetRequester(), r.GetRequestedVia(), ""), stampOrDash(r.GetCreatedAt()))
	}
	return w.Flush()
}

// targetTable prints one line a target, in the run's order.
func (a *app) targetTable(ts []*apiv1.FleetRunTarget) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "#\tNODE\tPOOL\tSTATE\tCOMMAND\tREASON\tSTARTED\tSETTLED\tMESSAGE")
	for _, t := range ts {
		st := t.GetState()
		if t.GetCommandState() != "" && t.GetCommandState() != st {
			st += " (" + t.GetCommandState() + ")"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.GetOrdinal(), t.GetNodeId(), dash(t.GetPool()), st, dash(t.GetCommandId()),
			dash(t.GetReason()), stampOrDash(t.GetStartedAt()), stampOrDash(t.GetSettledAt()), dash(t.GetMessage()))
	}
	return w.Flush()
}

// countsText is "a=2, b=1", by key.
func countsText(m map[string]uint32) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// stampOrDash is a timestamp in RFC 3339 (UTC), "-" when unset.
func stampOrDash(t *timestamppb.Timestamp) string {
	if t == nil || !t.IsValid() {
		return "-"
	}
	return ts(t.AsTime())
}
