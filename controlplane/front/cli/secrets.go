package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// secretsCommand wraps the secrets.* methods. A value goes in from a file
// or stdin, never the command line (where shell history and ps would keep
// it), and no command prints one: the API returns none.
func (a *app) secretsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Put, list and delete the tenant's secrets that commands name by secretRefs",
		Long: `secrets wraps the secrets.* methods. A command carries secretRefs, the names
of secrets, never a value; the node running it exchanges each ref for the value,
sealed to a one-time key of its own. Values go in and never come out:

  better-compute secrets put bmc-password --from-file ./bmc-password.txt
  printf %s "$TOKEN" | better-compute secrets put image-token --from-file -
  better-compute secrets list
  better-compute commands run nodeId=node_0412 kind=disk.deploy 'secretRefs=["image-token"]' \
      'payload={"url":"https://images/node.raw.xz","device":"/dev/nvme0n1","sha256":"…","authorizationSecretRef":"image-token"}'
  better-compute secrets delete image-token

The server needs secrets.keyFile in its config (see docs/secrets.md).`,
	}
	cmd.AddCommand(a.secretsPutCommand(), a.secretsListCommand(), a.secretsDeleteCommand())
	return cmd
}

func (a *app) secretsPutCommand() *cobra.Command {
	var from string
	var asJSON, keepNewline bool
	cmd := &cobra.Command{
		Use:   "put NAME --from-file FILE|- [tenantId=…]",
		Short: "Store or replace a secret; its value is read from a file or stdin (-)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usageErr("--from-file is required (a path, or - for stdin): a value never goes on the command line")
			}
			var value []byte
			var err error
			if from == "-" {
				value, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			} else {
				value, err = os.ReadFile(from)
			}
			if err != nil {
				return fmt.Errorf("reading the secret's value: %w", err)
			}
			if !keepNewline {
				// What `echo x > file` leaves: a trailing newline is
				// almost never part of a password or token.
				value = bytes.TrimSuffix(bytes.TrimSuffix(value, []byte("\n")), []byte("\r"))
			}
			m, err := FindMethod("secrets.put")
			if err != nil {
				return err
			}
			conn, err := a.connect(cmd)
			if err != nil {
				return err
			}
			req, err := BuildRequest(m.Desc.Input(), a.withTenant(m, append([]string{"name=" + args[0]}, args[1:]...)))
			if err != nil {
				return usageErr("secrets.put: %v", err)
			}
			req.(*apiv1.PutSecretRequest).Value = value
			resp, err := invoke(cmd.Context(), conn, m, req)
			clear(value)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			return a.secretsTable([]*apiv1.Secret{resp.(*apiv1.Secret)})
		},
	}
	cmd.Flags().StringVar(&from, "from-file", "", "file holding the value, or - for stdin")
	cmd.Flags().BoolVar(&keepNewline, "keep-newline", false, "keep a trailing newline of the file as part of the value")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) secretsListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [tenantId=…]",
		Short: "List the tenant's secrets: names, sizes and times, never values",
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "secrets.list", args)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			return a.secretsTable(resp.(*apiv1.ListSecretsResponse).GetItems())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) secretsDeleteCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "delete NAME [tenantId=…]",
		Short: "Delete a secret; a command that names it then fails with secret-not-found",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := a.call(cmd, "secrets.delete", append([]string{"name=" + args[0]}, args[1:]...))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			fmt.Fprintf(a.env.Stdout, "deleted secret %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) secretsTable(items []*apiv1.Secret) error {
	w := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tBYTES\tKEY\tUPDATED")
	for _, s := range items {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", s.GetName(), s.GetValueBytes(), s.GetKeyId(), stamp(s.GetUpdatedAt()))
	}
	return w.Flush()
}
