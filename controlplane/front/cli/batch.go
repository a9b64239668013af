package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/better-compute/commands/internal/trust"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// batchCommand is the destructive-batch quorum from the operator's side.
// approve signs on this machine: the approver key never leaves it.
func (a *app) batchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Create, inspect and approve destructive batches (the approver quorum)",
		Long: `batch wraps the commandBatches.* methods. A destructive command runs in a batch
that enough approvers signed; each approver signs the batch's statement with
their own key, locally:

  better-compute batch create reason="Reboot node_0412 after the kernel update" \
      'scope=[{"subject":"node_0412","kind":"node.reboot"}]' idempotencyKey=reboot-0412-batch
  better-compute commands run nodeId=node_0412 kind=node.reboot batchId=batch_… idempotencyKey=reboot-0412
  better-compute batch approve --batch batch_… --key approver.pem   # each approver
  better-compute batch get batch_…

Keys are Ed25519 in PEM (PKCS#8): better-compute pki create-approver makes one.`,
	}
	cmd.AddCommand(a.batchCreateCommand(), a.batchGetCommand(), a.batchListCommand(), a.batchApproveCommand())
	return cmd
}

func (a *app) batchCreateCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create reason=… scope=JSON [idempotencyKey=…] [deadlineSeconds=N]",
		Short: "Create a batch whose scope lists the (subject, kind[, payloadSha256]) it allows",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commandBatches.create", args)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			return a.batchTable(resp.(*apiv1.CommandBatch))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) batchGetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get batch_… [batchId=…]",
		Short: "Show a batch: its reason, scope, approvals and state",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commandBatches.get", idArg(args, "batchId"))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			return a.batchTable(resp.(*apiv1.CommandBatch))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) batchListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [state=awaiting-approval|approved|expired|recorded]",
		Short: "List the tenant's batches, newest first",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commandBatches.list", args)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "BATCH\tSTATE\tLEAVES\tAPPROVALS\tREQUESTER\tDEADLINE\tREASON")
			for _, b := range resp.(*apiv1.ListCommandBatchesResponse).GetItems() {
				approvals := fmt.Sprintf("%d/%d", len(b.GetApprovals()), b.GetThreshold())
				if b.GetState() == batchRecorded {
					approvals = "audit only"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", b.GetId(), b.GetState(), len(b.GetScope()), approvals,
					b.GetRequester(), stamp(b.GetDeadline()), b.GetReason())
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) batchTable(b *apiv1.CommandBatch) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "BATCH\t%s\n", b.GetId())
	fmt.Fprintf(w, "STATE\t%s\n", b.GetState())
	fmt.Fprintf(w, "REASON\t%s\n", b.GetReason())
	fmt.Fprintf(w, "REQUESTER\t%s (may not approve it)\n", b.GetRequester())
	fmt.Fprintf(w, "DEADLINE\t%s\n", stamp(b.GetDeadline()))
	fmt.Fprintf(w, "TREE\t%d leaves, root %s\n", b.GetTreeSize(), b.GetRootHash())
	var names []string
	for _, ap := range b.GetApprovals() {
		names = append(names, ap.GetApprover())
	}
	fmt.Fprintf(w, "APPROVALS\t%s\n", approvalsLine(b, names))
	fmt.Fprintln(w, "SCOPE\tSUBJECT\tKIND\tPAYLOAD")
	for _, l := range b.GetScope() {
		p := "any payload"
		if l.GetPayloadSha256() != "" {
			p = "only sha256 " + l.GetPayloadSha256()
		}
		fmt.Fprintf(w, "\t%s\t%s\t%s\n", l.GetSubject(), l.GetKind(), p)
	}
	return w.Flush()
}

// batchRecorded is the state of a batch made without approver keys.
const batchRecorded = "recorded"

// approvalsLine says where a batch stands on approvals: "0 of 0 (); 0 more
// needed" said nothing of a batch recorded without approver keys, which
// needs none and whose commands run at once.
func approvalsLine(b *apiv1.CommandBatch, names []string) string {
	got := fmt.Sprintf("%d of %d (%s)", len(b.GetApprovals()), b.GetThreshold(), strings.Join(names, ", "))
	switch b.GetState() {
	case batchRecorded:
		return "none needed: this server has no approver keys (pki.approvers), so the batch is recorded for audit only and its commands run at once"
	case "approved":
		return got + ": approved; its commands go out"
	case "expired":
		return got + ": the batch passed its deadline before it was approved"
	}
	return fmt.Sprintf("%s; %d more needed", got, b.GetApprovalsNeeded())
}

func (a *app) batchApproveCommand() *cobra.Command {
	var (
		batchID, keyPath string
		dryRun, asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "approve --batch batch_… --key approver.pem [--tenant …] [--dry-run]",
		Short: "Sign a batch with your approver key (locally) and upload the signature",
		Long: `approve fetches the batch, shows what you are signing (the reason, every leaf,
the payloads bound, the deadline, the requester), signs the batch's statement
with your Ed25519 key on this machine (purpose batch-approval; the key never
leaves it), uploads the signature, and prints how many approvals are still
needed. --dry-run shows what would be signed and uploads nothing.

Exit codes: 0 approved (or counted); 1 refused (not an approver key, your own
batch, already approved by this key, past its deadline).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batchID == "" || keyPath == "" {
				return usageErr("--batch and --key are required")
			}
			key, err := trust.LoadEd25519PrivateKey(keyPath)
			if err != nil {
				return usageErr("--key: %v", err)
			}
			resp, err := a.call(cmd, "commandBatches.get", []string{"batchId=" + batchID})
			if err != nil {
				return err
			}
			b := resp.(*apiv1.CommandBatch)
			// Check that the statement says what the table shows, so what the
			// approver reads is what they sign.
			st, err := trust.DecodeBatchStatement(b.GetStatement())
			if err != nil {
				return fmt.Errorf("the batch's statement does not decode: %w", err)
			}
			if st.BatchID != b.GetId() || st.RootHash != b.GetRootHash() || st.TreeSize != uint64(b.GetTreeSize()) || st.Requester != b.GetRequester() {
				return fmt.Errorf("the batch's statement does not match the batch shown (batch %s, root %s): refusing to sign", st.BatchID, st.RootHash)
			}
			if err := verifyScopeRoot(b); err != nil {
				return err
			}
			fmt.Fprintln(a.env.Stdout, "You are approving:")
			if err := a.batchTable(b); err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintln(a.env.Stdout, "dry run: nothing signed or uploaded")
				return nil
			}
			sig := trust.SignApproval(key, b.GetStatement())
			out, err := a.call(cmd, "commandBatches.approve", []string{"batchId=" + batchID, "keyId=" + sig.KeyID, "signature=" + base64Std(sig.Sig)})
			if err != nil {
				return err
			}
			nb := out.(*apiv1.CommandBatch)
			if asJSON {
				return a.printJSON(nb)
			}
			if nb.GetState() == "approved" {
				fmt.Fprintf(a.env.Stdout, "signed with key %s: batch %s is approved; its commands go out now\n", sig.KeyID[:12], nb.GetId())
			} else {
				fmt.Fprintf(a.env.Stdout, "signed with key %s: %d more approval(s) needed for batch %s\n", sig.KeyID[:12], nb.GetApprovalsNeeded(), nb.GetId())
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&batchID, "batch", "", "the batch to approve (batch_…)")
	cmd.Flags().StringVar(&keyPath, "key", "", "your approver key (PEM, PKCS#8 Ed25519)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would be signed; upload nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the batch as JSON after approving")
	return cmd
}

// verifyScopeRoot recomputes the tree from the scope shown and checks it
// is the root the statement names: the leaves an approver reads are the
// leaves they sign.
func verifyScopeRoot(b *apiv1.CommandBatch) error {
	var leaves []trust.Leaf
	for _, l := range b.GetScope() {
		tl := trust.Leaf{Subject: l.GetSubject(), Kind: l.GetKind()}
		if l.GetPayloadSha256() != "" {
			d, err := hexDecode(l.GetPayloadSha256())
			if err != nil {
				return fmt.Errorf("scope payloadSha256 %q: %w", l.GetPayloadSha256(), err)
			}
			tl.PayloadSHA256 = d
		}
		leaves = append(leaves, tl)
	}
	t, err := trust.NewTree(leaves)
	if err != nil {
		return err
	}
	if hexEncode(t.Root()) != b.GetRootHash() {
		return fmt.Errorf("the scope shown does not make the root the statement names: refusing to sign")
	}
	return nil
}
