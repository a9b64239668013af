package trust

import (
	"crypto/sha256"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// VerifyCommand checks a command envelope against the bundle, as check 4
// does on the node: the worker key's certificate chains to a root in the
// bundle that is valid now, the certificate is within its window, the
// signature is over the exact command bytes received, and the command's
// audience (its node id) is nodeID, the node's own id from its
// certificate. It returns the command decoded from the verified bytes, so
// the kind and the payload that run are the signed ones.
func VerifyCommand(b *Bundle, env *agentv1.CommandEnvelope, nodeID string, now time.Time) (*agentv1.Command, error) {
	return verifyCommand(b, env, nodeID, now, VerifyWorkerSigned)
}

// VerifyCommand is the package's VerifyCommand, with the worker-key
// certificate's chain to the bundle remembered.
func (wc *WorkerCache) VerifyCommand(b *Bundle, env *agentv1.CommandEnvelope, nodeID string, now time.Time) (*agentv1.Command, error) {
	return verifyCommand(b, env, nodeID, now, wc.VerifyWorkerSigned)
}

func verifyCommand(b *Bundle, env *agentv1.CommandEnvelope, nodeID string, now time.Time,
	workerSigned func(*Bundle, []byte, Purpose, []byte, []byte, time.Time) (WorkerCert, error)) (*agentv1.Command, error) {
	if env == nil {
		return nil, fmt.Errorf("%w: no envelope", ErrMalformed)
	}
	if _, err := workerSigned(b, env.GetWorkerCert(), PurposeCommand, env.GetCommand(), env.GetSignature(), now); err != nil {
		return nil, err
	}
	var c agentv1.Command
	if err := proto.Unmarshal(env.GetCommand(), &c); err != nil {
		return nil, fmt.Errorf("%w: signed command bytes: %w", ErrMalformed, err)
	}
	if c.GetNodeId() != nodeID {
		return nil, fmt.Errorf("%w: signed for node %q, this is %q", ErrBadSignature, c.GetNodeId(), nodeID)
	}
	return &c, nil
}

// CommandDigest is the SHA-256 of the signed encoding of a command's exact
// bytes: what an attested result names, so a result cannot be moved to
// another command.
func CommandDigest(commandBytes []byte) [32]byte {
	return sha256.Sum256(PAE(PurposeCommand, commandBytes))
}
