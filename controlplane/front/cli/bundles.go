package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/server/serverconfig"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// bundlesCommand reads support bundles from the blob store. There is no API
// to download a bundle (the spec: "operators read it from the blob store"),
// so the CLI opens the store with the server's own supportBundles settings.
func (a *app) bundlesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundles",
		Short: "Download support bundles from the blob store",
	}
	cmd.AddCommand(a.bundleDownloadCommand())
	return cmd
}

func (a *app) bundleDownloadCommand() *cobra.Command {
	var serverConfig, output string
	cmd := &cobra.Command{
		Use:   "download (BUNDLE_KEY | cmd_… nodeId=…) --server-config FILE [-o FILE]",
		Short: "Copy a support bundle out of the blob store, checking its SHA-256",
		Long: `download copies one support bundle (a tar.gz) out of the blob store named
by the server's supportBundles settings (--server-config: bc-server's YAML, for
its blob driver, directory or bucket, and credentials).

Name the bundle by its key (commands get shows it as bundleKey:
support-bundles/{nodeId}/{key}.bundle), or by the logs.collect command's id
with nodeId=…: the CLI then reads the bundleKey and the SHA-256 from the
command's result through the API and checks the copy against it.

  better-compute bundles download cmd_01… nodeId=node_0412 --server-config /etc/bc-server/server.yaml
  better-compute bundles download support-bundles/node_0412/abc.bundle --server-config server.yaml -o bundle.tar.gz
  tar -tzf bundle.tar.gz    # MANIFEST.json and README.txt say what it holds and what was truncated`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if serverConfig == "" {
				return usageErr("--server-config is required: the bundle is read from the blob store that bc-server's supportBundles names")
			}
			key, wantSHA := args[0], ""
			if strings.HasPrefix(key, "cmd_") {
				resp, err := a.call(cmd, "commands.get", append([]string{"commandId=" + key}, args[1:]...))
				if err != nil {
					return err
				}
				c := resp.(*apiv1.Command)
				if c.GetBundleKey() == "" {
					return fmt.Errorf("command %s has no bundleKey: it is not a logs.collect with a support bundle", key)
				}
				key = c.GetBundleKey()
				if r := c.GetResult().GetStructValue(); r != nil {
					wantSHA = r.GetFields()["sha256"].GetStringValue()
				}
			}
			cfg, err := serverconfig.LoadConfig(serverConfig)
			if err != nil {
				return err
			}
			if cfg.SupportBundles == nil {
				return fmt.Errorf("%s has no supportBundles section: this server stores no bundles", serverConfig)
			}
			store, err := bundles.Open(*cfg.SupportBundles)
			if err != nil {
				return err
			}
			rc, info, err := store.Open(cmd.Context(), key)
			if err != nil {
				return fmt.Errorf("opening %s in the blob store: %w", key, err)
			}
			defer rc.Close()
			if output == "" {
				output = strings.TrimSuffix(path.Base(key), ".bundle") + ".tar.gz"
			}
			f, err := os.Create(output)
			if err != nil {
				return err
			}
			h := sha256.New()
			n, err := io.Copy(io.MultiWriter(f, h), rc)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(output)
				return fmt.Errorf("copying %s: %w", key, err)
			}
			got := hex.EncodeToString(h.Sum(nil))
			if wantSHA != "" && !strings.EqualFold(got, wantSHA) {
				_ = os.Remove(output)
				return fmt.Errorf("%s: SHA-256 %s does not match the %s the node reported; the copy was removed", key, got, wantSHA)
			}
			fmt.Fprintf(a.env.Stderr, "%s: %d bytes (stored %d), sha256 %s -> %s\n", key, n, info.Size, got, output)
			return nil
		},
	}
	cmd.Flags().StringVar(&serverConfig, "server-config", "", "bc-server's config file, for its supportBundles blob store")
	cmd.Flags().StringVarP(&output, "output", "o", "", "where to write the bundle (default: <key>.tar.gz here)")
	return cmd
}
