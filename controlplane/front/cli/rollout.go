package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// rolloutCommand shows and steers the pools' rollouts of the daemon version.
func (a *app) rolloutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show, set, pause, resume and retry the pools' desired daemon versions",
		Long: `rollout wraps the rollouts.* methods. Each pool has a desired bcd version; the
rollout module upgrades the pool's nodes with daemon.upgrade, in waves within
the pool's disruption budget (pools set-budget), and pauses the rollout on the
first node that rolls back, and once maxFailures nodes (1 unless set) failed
otherwise (a package refused for its digest or signature, a failed
self-check, no news within the rejoin window). retry sends the failed and
rolled-back nodes a new command and resumes it; set with the same version and
another package (a fixed one) does the same.

  better-compute rollout set pool=gpu-a version=1.4.0 packageUrl=https://… packageSize=N packageSha256=HEX release=BASE64
      (packageSha256, packageSize and release come from: better-compute pki sign-release --json)
  better-compute rollout status gpu-a        per node: current, target, state
  better-compute rollout pause gpu-a [reason=…]
  better-compute rollout resume gpu-a
  better-compute rollout retry gpu-a [nodeId=node_…]`,
	}
	var setJSON, statusJSON, pauseJSON, resumeJSON, retryJSON bool
	set := &cobra.Command{
		Use:   "set pool=… version=… packageUrl=… packageSize=N packageSha256=HEX release=BASE64 [rejoinWindowSeconds=N] [maxFailures=N]",
		Short: "Set a pool's desired daemon version (compute:pools:admin)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "rollouts.set", args, setJSON, func(m proto.Message) error { return a.rolloutTable(m.(*apiv1.Rollout)) })
		},
	}
	jsonFlag(set, &setJSON)
	status := &cobra.Command{
		Use:   "status pool=…",
		Short: "Show a pool's rollout: per node its current version, the target and its state",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "rollouts.status", idArg(args, "pool"), statusJSON, func(m proto.Message) error { return a.rolloutTable(m.(*apiv1.Rollout)) })
		},
	}
	jsonFlag(status, &statusJSON)
	pause := &cobra.Command{
		Use:   "pause pool=… [reason=…]",
		Short: "Stop new upgrades in the pool; those in flight finish (compute:pools:admin)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "rollouts.pause", idArg(args, "pool"), pauseJSON, func(m proto.Message) error { return a.rolloutTable(m.(*apiv1.Rollout)) })
		},
	}
	jsonFlag(pause, &pauseJSON)
	resume := &cobra.Command{
		Use:   "resume pool=…",
		Short: "Let a paused rollout go on; nodes that rolled back are not retried (compute:pools:admin)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "rollouts.resume", idArg(args, "pool"), resumeJSON, func(m proto.Message) error { return a.rolloutTable(m.(*apiv1.Rollout)) })
		},
	}
	jsonFlag(resume, &resumeJSON)
	retry := &cobra.Command{
		Use:   "retry pool=… [nodeId=…]",
		Short: "Send the nodes that failed or rolled back a new command and resume the rollout (compute:pools:admin)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.callPrint(cmd, "rollouts.retry", idArg(args, "pool"), retryJSON, func(m proto.Message) error { return a.rolloutTable(m.(*apiv1.Rollout)) })
		},
	}
	jsonFlag(retry, &retryJSON)
	cmd.AddCommand(set, status, pause, resume, retry)
	return cmd
}

func (a *app) rolloutTable(r *apiv1.Rollout) error {
	state := "running"
	if r.GetPaused() {
		state = "PAUSED: " + r.GetPausedReason()
	}
	fmt.Fprintf(a.env.Stdout, "pool %s: target %s (generation %d), %s; failures %d/%d\n", r.GetPool(), r.GetVersion(), r.GetGeneration(), state,
		r.GetFailures(), r.GetMaxFailures())
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tCURRENT\tTARGET\tSTATE\tCOMMAND\tREASON")
	for _, n := range r.GetNodes() {
		cur := n.GetCurrent()
		if cur == "" {
			cur = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.GetNodeId(), cur, n.GetTarget(), n.GetState(), dash(n.GetCommandId()), dash(n.GetReason()))
	}
	return w.Flush()
}
