package cli

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/better-compute/commands/internal/trust"
)

// pkiCommand is the command-signing authority's tooling. Every key is made
// and used on this machine: nothing here calls the API, and no private key
// leaves the file it is written to.
func (a *app) pkiCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pki",
		Short: "Create the command-signing authority, worker keys and approver keys (offline)",
		Long: `pki makes the keys that protect commands from a compromised gateway. Nothing
here talks to the API; keys are Ed25519 in PEM (PKCS#8), written 0600, never
overwritten.

  better-compute pki create-root --out /etc/bc-server/command-root.pem
      the command-signing authority: give it to bc-server as
      pki.commandSigning (only the API/signing process reads it)
  better-compute pki public-key --key command-root.pem
      its public half, for a node's trustAnchors or pki.commandSigningRoots
  better-compute pki issue-worker-key --root command-root.pem --out-key w.pem --out-cert w.cert
      a worker key the root certifies for 24 hours (bc-server makes and
      renews its own; this is for signing outside bc-server and for tests)
  better-compute pki rotate --current command-root.pem --out new-root.pem
      a new root, and the three configuration steps of a rotation
  better-compute pki create-approver --out alice.pem
      an approver key of the destructive-batch quorum (pki.approvers)
  better-compute pki create-release-key --out release.pem
      a bcd release key (pki.releaseKeys)
  better-compute pki sign-release --key release.pem --version 1.4.0 --package bcd-1.4.0.tar.gz
      the signed release statement daemon.upgrade's payload carries`,
	}
	cmd.AddCommand(a.pkiCreateRootCommand(), a.pkiPublicKeyCommand(), a.pkiIssueWorkerKeyCommand(), a.pkiRotateCommand(), a.pkiCreateApproverCommand(),
		a.pkiCreateReleaseKeyCommand(), a.pkiSignReleaseCommand())
	return cmd
}

// writeNewKey writes a fresh Ed25519 private key to path (0600, refusing an
// existing file) and its public half beside it (path + ".pub").
func writeNewKey(path string) (ed25519.PrivateKey, string, error) {
	if path == "" {
		return nil, "", usageErr("--out is required")
	}
	pub, priv, err := trust.NewEd25519()
	if err != nil {
		return nil, "", err
	}
	privPEM, err := trust.MarshalPrivateKeyPEM(priv)
	if err != nil {
		return nil, "", err
	}
	pubPEM, err := trust.MarshalPublicKeyPEM(pub)
	if err != nil {
		return nil, "", err
	}
	if err := writeExclusive(path, privPEM, 0o600); err != nil {
		return nil, "", err
	}
	if err := writeExclusive(path+".pub", pubPEM, 0o644); err != nil {
		return nil, "", err
	}
	return priv, trust.Ed25519KeyID(pub), nil
}

func writeExclusive(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: refusing to overwrite a key; pick another --out or remove it first", path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return f.Close()
}

// keyReport is what the key commands print.
type keyReport struct {
	Key       string `json:"key,omitempty"`
	PublicKey string `json:"publicKey,omitempty"`
	Cert      string `json:"cert,omitempty"`
	KeyID     string `json:"keyId"`
	NotAfter  string `json:"notAfter,omitempty"`
}

func (a *app) report(asJSON bool, r keyReport, lines ...string) error {
	if asJSON {
		enc := json.NewEncoder(a.env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	for _, l := range lines {
		fmt.Fprintln(a.env.Stdout, l)
	}
	return nil
}

func (a *app) pkiCreateRootCommand() *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create-root --out FILE",
		Short: "Create the command-signing authority (an Ed25519 root key)",
		Long: `create-root writes a new Ed25519 root key to FILE (0600) and its public key to
FILE.pub. Keep FILE where only the operator and bc-server's signing process
(pki.commandSigning) can read it; a gateway host never needs it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, id, err := writeNewKey(out)
			if err != nil {
				return err
			}
			return a.report(asJSON, keyReport{Key: out, PublicKey: out + ".pub", KeyID: id},
				"created the command-signing root "+id,
				"  private key: "+out+" (0600; give it to bc-server as pki.commandSigning)",
				"  public key:  "+out+".pub (for nodes' trustAnchors and for pki.commandSigningRoots during a rotation)")
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the root's private key to (FILE.pub gets the public key)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) pkiCreateApproverCommand() *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create-approver --out FILE",
		Short: "Create an approver key pair for the destructive-batch quorum",
		Long: `create-approver writes an Ed25519 approver key to FILE (0600; it stays with
the approver, who signs with better-compute batch approve --key FILE) and its
public key to FILE.pub, which goes into bc-server's pki.approvers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, id, err := writeNewKey(out)
			if err != nil {
				return err
			}
			return a.report(asJSON, keyReport{Key: out, PublicKey: out + ".pub", KeyID: id},
				"created the approver key "+id,
				"  private key: "+out+" (0600; it never leaves the approver's machine)",
				"  public key:  "+out+".pub (add it to bc-server's pki.approvers)")
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the approver's private key to (FILE.pub gets the public key)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) pkiPublicKeyCommand() *cobra.Command {
	var keyPath string
	cmd := &cobra.Command{
		Use:   "public-key --key FILE",
		Short: "Print the public key (PEM) and key id of a key file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyPath == "" {
				return usageErr("--key is required")
			}
			pub, err := trust.LoadEd25519PublicKey(keyPath)
			if err != nil {
				return err
			}
			p, err := trust.MarshalPublicKeyPEM(pub)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stderr, "key id %s\n", trust.Ed25519KeyID(pub))
			_, err = a.env.Stdout.Write(p)
			return err
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "a private or public key file (PEM)")
	return cmd
}

func (a *app) pkiIssueWorkerKeyCommand() *cobra.Command {
	var rootPath, outKey, outCert string
	var lifetime time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "issue-worker-key --root FILE --out-key FILE --out-cert FILE [--lifetime 24h]",
		Short: "Issue a worker key that the root certifies (at most 24 hours)",
		Long: `issue-worker-key makes a worker key and a certificate by the root for
commands and node specs, valid from now for --lifetime (at most 24h). bc-server
issues and renews its own worker keys in memory; use this to sign outside it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rootPath == "" || outKey == "" || outCert == "" {
				return usageErr("--root, --out-key and --out-cert are required")
			}
			root, err := trust.LoadEd25519PrivateKey(rootPath)
			if err != nil {
				return err
			}
			w, err := trust.NewWorkerKey(root, time.Now(), lifetime)
			if err != nil {
				return usageErr("%v", err)
			}
			kp, err := trust.MarshalPrivateKeyPEM(w.Key)
			if err != nil {
				return err
			}
			if err := writeExclusive(outKey, kp, 0o600); err != nil {
				return err
			}
			if err := writeExclusive(outCert, w.Cert, 0o644); err != nil {
				return err
			}
			id := trust.Ed25519KeyID(w.Key.Public().(ed25519.PublicKey))
			na := w.NotAfter.UTC().Format(time.RFC3339)
			return a.report(asJSON, keyReport{Key: outKey, Cert: outCert, KeyID: id, NotAfter: na},
				"issued worker key "+id+", valid until "+na,
				"  key:         "+outKey, "  certificate: "+outCert)
		},
	}
	cmd.Flags().StringVar(&rootPath, "root", "", "the root's private key (from create-root)")
	cmd.Flags().StringVar(&outKey, "out-key", "", "file for the worker's private key")
	cmd.Flags().StringVar(&outCert, "out-cert", "", "file for the worker's certificate")
	cmd.Flags().DurationVar(&lifetime, "lifetime", trust.MaxWorkerKeyLifetime, "how long the certificate is valid (at most 24h)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) pkiRotateCommand() *cobra.Command {
	var current, out string
	cmd := &cobra.Command{
		Use:   "rotate --current FILE --out FILE",
		Short: "Create the next root and print the steps of a root rotation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if current == "" {
				return usageErr("--current is required: the root bc-server signs with now")
			}
			cur, err := trust.LoadEd25519PublicKey(current)
			if err != nil {
				return err
			}
			_, id, err := writeNewKey(out)
			if err != nil {
				return err
			}
			w := a.env.Stdout
			fmt.Fprintf(w, "created the next root %s (%s, %s.pub)\n\n", id, out, out)
			fmt.Fprintf(w, "Rotate from %s to %s in three steps, each a bc-server reload (SIGHUP or restart):\n\n", trust.Ed25519KeyID(cur)[:12], id[:12])
			fmt.Fprintf(w, "1. Announce: keep signing with the current root and trust the next one too.\n")
			fmt.Fprintf(w, "     pki:\n       commandSigning: %s\n       commandSigningRoots: [%s.pub]\n", current, out)
			fmt.Fprintf(w, "   The trust bundle's version rises; online nodes take it (the current root signs it).\n\n")
			fmt.Fprintf(w, "2. Switch: sign with the next root, still trusting the old one.\n")
			fmt.Fprintf(w, "     pki:\n       commandSigning: %s\n       commandSigningRoots: [%s.pub]\n", out, current)
			fmt.Fprintf(w, "   Wait until every node shows the new trust version (better-compute nodes list, its TRUST column).\n\n")
			fmt.Fprintf(w, "3. Retire: drop the old root.\n")
			fmt.Fprintf(w, "     pki:\n       commandSigning: %s\n\n", out)
			fmt.Fprintf(w, "A node offline through step 1 cannot verify a bundle that only the next root\n")
			fmt.Fprintf(w, "signs; it refuses it, says so in its TrustBundle condition, and is rejoined\n")
			fmt.Fprintf(w, "(bcd join with a new token) to get the new bundle. See docs/trust.md.\n")
			return nil
		},
	}
	cmd.Flags().StringVar(&current, "current", "", "the current root (private or public key file)")
	cmd.Flags().StringVar(&out, "out", "", "file for the next root's private key (FILE.pub gets the public key)")
	return cmd
}
