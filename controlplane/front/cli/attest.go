package cli

import (
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
	"google.golang.org/protobuf/proto"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/better-compute/commands/internal/trust"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// verdict is what `commands verify` prints.
type verdict struct {
	CommandID string `json:"commandId"`
	NodeID    string `json:"nodeId"`
	Kind      string `json:"kind"`
	State     string `json:"state"`
	Signed    bool   `json:"signed"`
	Verified  bool   `json:"verified"`
	Serial    string `json:"certificateSerial,omitempty"`
	Reason    string `json:"reason,omitempty"`
	CASource  string `json:"nodeCa"`
}

func (a *app) verifyCommand() *cobra.Command {
	var (
		asJSON bool
		caFile string
	)
	cmd := &cobra.Command{
		Use:   "verify cmd_… nodeId=… [--node-ca ca.pem]",
		Short: "Check a command's attested result against the node's certificates",
		Long: `verify checks, on this machine, that the node signed exactly this result for
exactly this command: the result's SHA-256 matches the bytes the node sent,
the signature (purpose command-update) is over the command id, the digest of
the signed command, the state and that SHA-256, and a certificate the node CA
issued to the node (nodes.listCertificates) verifies it.

Give the node CA with --node-ca (the gateway's caDir/ca.pem) to verify without
trusting the API server for it; without it the CA the API returns is used, and
the verdict says so.

Exit codes: 0 verified; 3 not verified (forged, altered or unattested); 1 the
calls failed.

  better-compute commands verify cmd_01… nodeId=node_0412 --node-ca ca.pem`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "commands.get", idArg(args, "commandId"))
			if err != nil {
				return err
			}
			c := resp.(*apiv1.Command)
			cr, err := a.call(cmd, "nodes.listCertificates", []string{"nodeId=" + c.GetNodeId(), "tenantId=" + c.GetTenantId()})
			if err != nil {
				return err
			}
			certs := cr.(*apiv1.NodeCertificates)
			v := verdict{CommandID: c.GetId(), NodeID: c.GetNodeId(), Kind: c.GetKind(), State: c.GetState(), Signed: c.GetSigned(), CASource: "the API's answer"}
			caPEM := certs.GetNodeCaPem()
			if caFile != "" {
				if caPEM, err = os.ReadFile(caFile); err != nil {
					return usageErr("--node-ca: %v", err)
				}
				v.CASource = caFile
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caPEM) {
				return fmt.Errorf("no node CA to verify with: give --node-ca (the gateway's caDir/ca.pem)")
			}
			serial, verr := verifyAttested(c, certs, pool)
			v.Verified, v.Serial = verr == nil, serial
			if verr != nil {
				v.Reason = verr.Error()
			}
			if asJSON {
				enc := json.NewEncoder(a.env.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(v); err != nil {
					return err
				}
			} else {
				w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "COMMAND\t%s (%s on %s, %s)\n", v.CommandID, v.Kind, v.NodeID, v.State)
				fmt.Fprintf(w, "SIGNED\t%v\n", v.Signed)
				if v.Verified {
					fmt.Fprintf(w, "VERDICT\tverified: the node signed this result (certificate %s; node CA from %s)\n", v.Serial, v.CASource)
				} else {
					fmt.Fprintf(w, "VERDICT\tNOT VERIFIED: %s\n", v.Reason)
				}
				if err := w.Flush(); err != nil {
					return err
				}
			}
			if !v.Verified {
				return &exitError{code: ExitCommandFailed, err: fmt.Errorf("the result of %s is not verified: %s", v.CommandID, v.Reason)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().StringVar(&caFile, "node-ca", "", "the node CA certificate (PEM) to verify the node's certificates with")
	return cmd
}

// verifyAttested checks the command's attestation as the API shows it.
func verifyAttested(c *apiv1.Command, certs *apiv1.NodeCertificates, pool *x509.CertPool) (string, error) {
	if len(c.GetNodeSig()) == 0 {
		return "", trust.ErrNoAttestation
	}
	// The digest the attestation names is recomputed from the command's
	// own bytes, which must be this command for this node: never the
	// digest the API hands over.
	if len(c.GetCommandBytes()) == 0 {
		return "", trust.ErrNoCommand
	}
	var signed agentv1.Command
	if err := proto.Unmarshal(c.GetCommandBytes(), &signed); err != nil || signed.GetId() != c.GetId() || signed.GetNodeId() != c.GetNodeId() {
		return "", fmt.Errorf("%w: the command bytes shown are not command %s of node %s", trust.ErrNoCommand, c.GetId(), c.GetNodeId())
	}
	cmdDigest := trust.CommandDigest(c.GetCommandBytes())
	if shown := c.GetCommandSha256(); shown != "" && shown != hex.EncodeToString(cmdDigest[:]) {
		return "", fmt.Errorf("%w: commandSha256 %s is not the digest of the command's bytes", trust.ErrNoCommand, shown)
	}
	want, err := hex.DecodeString(c.GetResultSha256())
	if err != nil {
		return "", fmt.Errorf("resultSha256 %q is not hex", c.GetResultSha256())
	}
	// The result the API shows must be the document the node signed.
	if c.GetResult() != nil {
		shown, _ := json.Marshal(c.GetResult().AsInterface())
		var a, b any
		if json.Unmarshal(shown, &a) != nil || json.Unmarshal(c.GetResultBytes(), &b) != nil || !jsonEqual(a, b) {
			return "", fmt.Errorf("%w: the result shown is not the result bytes the node sent", trust.ErrResultAltered)
		}
	}
	reported := time.Now()
	if c.GetSettledAt() != nil {
		reported = c.GetSettledAt().AsTime()
	}
	var records []trust.NodeCertRecord
	for _, nc := range certs.GetCertificates() {
		r := trust.NodeCertRecord{Serial: nc.GetSerial(), PEM: nc.GetPem()}
		if nc.GetRevokedAt() != nil {
			t := nc.GetRevokedAt().AsTime()
			r.RevokedAt = &t
		}
		records = append(records, r)
	}
	return trust.VerifyAttestedDigest(trust.AttestedResult{
		CommandID: c.GetId(), NodeID: c.GetNodeId(), State: c.GetState(), ResultBytes: c.GetResultBytes(),
		ResultSHA256: want, NodeSig: c.GetNodeSig(), ReportedAt: reported,
	}, cmdDigest, pool, records)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
