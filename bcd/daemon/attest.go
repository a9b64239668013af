package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/better-compute/commands/bcd/journal"
	"github.com/better-compute/commands/internal/trust"
)

// updateOf is a record's state as an update; the outcome of an attested
// kind carries the node's signature. The spec: "For attested kinds the node
// signs its result with its node key: CommandUpdate.node_sig, under purpose
// command-update, over the command id, the state and the SHA-256 of the
// result", and over the digest of the exact command bytes it answers, so a
// gateway can neither forge an outcome nor move one to another command.
func (d *Daemon) updateOf(rec journal.Record) Update {
	u := updateOf(rec)
	if !rec.Flags.Attested || !rec.State.Terminal() {
		return u
	}
	sig, sum, err := d.attest(rec)
	if err != nil {
		d.logger.Error("cannot sign the attested outcome: it goes unsigned, and consumers refuse it", "command_id", rec.ID, "kind", rec.Kind, "error", err)
		return u
	}
	if sig != nil {
		u.NodeSig = sig
		// The signature covers the SHA-256 of the exact result bytes that
		// go out, so the update carries that one.
		u.ResultSHA256 = sum
	}
	return u
}

// attest signs rec's outcome; a nil signature means there is nothing to
// sign with (no node key) or nothing to name (a command that arrived
// without its bytes, as a local bcd exec does).
func (d *Daemon) attest(rec journal.Record) (sig []byte, resultSHA256 string, err error) {
	if d.cfg.NodeKey == nil || rec.CommandDigest == "" {
		return nil, "", nil
	}
	digest, err := hex.DecodeString(rec.CommandDigest)
	if err != nil || len(digest) != sha256.Size {
		return nil, "", fmt.Errorf("the journal's command digest %q is not a SHA-256", rec.CommandDigest)
	}
	st := trust.ResultStatement{CommandID: rec.ID, NodeID: d.cfg.NodeID, State: string(rec.State)}
	copy(st.CommandDigest[:], digest)
	if len(rec.Result) > 0 {
		sum := sha256.Sum256(rec.Result)
		st.ResultSHA256 = sum[:]
		resultSHA256 = hex.EncodeToString(sum[:])
	}
	sig, err = trust.SignResult(d.cfg.NodeKey, st)
	if err != nil {
		return nil, "", err
	}
	return sig, resultSHA256, nil
}
