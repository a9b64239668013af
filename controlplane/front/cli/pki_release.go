package cli

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/better-compute/commands/internal/trust"
)

func (a *app) pkiCreateReleaseKeyCommand() *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create-release-key --out FILE",
		Short: "Create a bcd release key (pki.releaseKeys)",
		Long: `create-release-key writes an Ed25519 release key to FILE (0600) and its public
key to FILE.pub, which goes into bc-server's pki.releaseKeys: the trust bundle
carries it, and a node installs a daemon.upgrade package only when a release
key signed its release statement (better-compute pki sign-release).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, id, err := writeNewKey(out)
			if err != nil {
				return err
			}
			return a.report(asJSON, keyReport{Key: out, PublicKey: out + ".pub", KeyID: id},
				"created the release key "+id,
				"  private key: "+out+" (0600; keep it with the release process, never on bc-server)",
				"  public key:  "+out+".pub (add it to bc-server's pki.releaseKeys)")
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the release key to (FILE.pub gets the public key)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// releaseReport is what sign-release prints: the payload's package and
// release fields for daemon.upgrade.
type releaseReport struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
	// Release is the signed statement, base64 (the payload's release).
	Release        string `json:"release"`
	AllowDowngrade bool   `json:"allowDowngrade,omitempty"`
}

func (a *app) pkiSignReleaseCommand() *cobra.Command {
	var keyPath, pkg, version string
	var downgrade, asJSON bool
	cmd := &cobra.Command{
		Use:   "sign-release --key FILE --version V --package FILE",
		Short: "Sign a bcd release package for daemon.upgrade",
		Long: `sign-release hashes the package (the tar.gz holding bcd, bcd-upgrader,
plugins/ and plugin-sha256.json) and signs {version, sha256, size} with the
release key. It prints the package's sha256 and size and the release
(base64), which go into daemon.upgrade's payload. --allow-downgrade signs the
release for installing over a newer version too; without it a node refuses
the downgrade whatever the payload says.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyPath == "" || pkg == "" || version == "" {
				return usageErr("--key, --version and --package are required")
			}
			key, err := trust.LoadEd25519PrivateKey(keyPath)
			if err != nil {
				return err
			}
			f, err := os.Open(pkg)
			if err != nil {
				return fmt.Errorf("--package: %w", err)
			}
			defer f.Close()
			h := sha256.New()
			n, err := io.Copy(h, f)
			if err != nil {
				return fmt.Errorf("--package: %w", err)
			}
			rel := trust.Release{Version: version, SHA256: hex.EncodeToString(h.Sum(nil)), Size: n, AllowDowngrade: downgrade, IssuedAt: time.Now().UTC().Truncate(time.Second)}
			wire, err := trust.SignRelease(rel, key)
			if err != nil {
				return err
			}
			if _, _, err := trust.DecodeRelease(wire); err != nil {
				return fmt.Errorf("--version %q: %w", version, err)
			}
			rep := releaseReport{Version: version, SHA256: rel.SHA256, Size: n, Release: base64.StdEncoding.EncodeToString(wire), AllowDowngrade: downgrade}
			if asJSON {
				enc := json.NewEncoder(a.env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			fmt.Fprintf(a.env.Stdout, "signed release %s: %d bytes, sha256 %s\nrelease: %s\n", version, n, rel.SHA256, rep.Release)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the release key (from create-release-key)")
	cmd.Flags().StringVar(&pkg, "package", "", "the package file")
	cmd.Flags().StringVar(&version, "version", "", "the bcd version the package holds")
	cmd.Flags().BoolVar(&downgrade, "allow-downgrade", false, "sign the release for installing over a newer version")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
