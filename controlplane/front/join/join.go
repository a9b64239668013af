// Package join exchanges one-time join tokens for node certificates. An
// admin creates a token for a registered node (its role and, for a
// restricted identity, its allowed kinds); the token is stored only as its
// SHA-256. The Join service (bc.agent.v1.Join) takes an unused, unexpired
// token and a CSR, burns the token with one guarded UPDATE, records the
// allowed kinds on the node and returns a certificate from the node CA, all
// in one transaction: two concurrent joins with one token make one
// certificate, and a join that fails leaves the token usable.
//
// Join is served without a client certificate (a joining node has none
// yet): the server puts it on the gateway listener, whose TLS verifies a
// client certificate only when one is given; the Session service itself
// refuses a session without a verified node certificate.
package join

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/better-compute/commands/internal/trust"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/trust/jointokens"
	"github.com/better-compute/commands/controlplane/trust/nodecerts"
	"github.com/better-compute/commands/controlplane/trust/pki"
	"github.com/better-compute/commands/internal/names"
	agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"
)

// TokenPrefix starts every join token, so a leaked one is recognisable.
const TokenPrefix = "bcjoin_"

// Token TTL bounds.
const (
	DefaultTTL = time.Hour
	MaxTTL     = 7 * 24 * time.Hour
)

// ErrNodeNotFound is returned by CreateToken for an unknown or deleted node.
var ErrNodeNotFound = errors.New("node not found")

// TokenRequest is what an admin asks a token for.
type TokenRequest struct {
	// NodeID is the registered node the token joins.
	NodeID string
	// Role is the agent role the certificate carries ("node" when empty).
	Role string
	// AllowedKinds makes the certificate a restricted identity that accepts
	// only these kinds; empty is a full identity.
	AllowedKinds []string
	// TTL is how long the token may be used (DefaultTTL when zero, at most MaxTTL).
	TTL time.Duration
	// Pool, when set, is the pool the node joins into (its label).
	Pool string
}

// Token is a created join token. Value is shown once: only its hash is stored.
type Token struct {
	Value     string
	NodeID    string
	ExpiresAt time.Time
}

// Service creates tokens and serves bc.agent.v1.Join.
type Service struct {
	agentv1.UnimplementedJoinServer
	pool   *pgxpool.Pool
	queue  *queue.Queue
	ca     *pki.CA
	trust  BundleSource
	logger hclog.Logger
}

// BundleSource hands out the newest published trust bundle (nil when none:
// commands go unsigned). trustbundle.Source implements it.
type BundleSource interface {
	Current(ctx context.Context) (*agentv1.TrustBundle, error)
}

// New builds the join service on the node CA. trust, when set, is where the
// trust bundle of every JoinResponse comes from.
func New(pool *pgxpool.Pool, q *queue.Queue, ca *pki.CA, trust BundleSource, logger hclog.Logger) *Service {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Service{pool: pool, queue: q, ca: ca, trust: trust, logger: logger.Named("join")}
}

// CA is the node CA the service issues from.
func (s *Service) CA() *pki.CA { return s.ca }

// Hash is how a token is stored.
func Hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateToken stores a new one-time token for req.NodeID and returns it. A
// request the token could never join with (a node id no certificate can
// carry, a role that is not an agent role, a malformed kind, a TTL out of
// bounds) is an *errcode.Error with code INVALID_INPUT naming the field,
// checked against the same grammar (internal/names) as the API and bcd.
func (s *Service) CreateToken(ctx context.Context, db store.DBTX, req TokenRequest) (Token, error) {
	if err := names.ID("nodeId", req.NodeID); err != nil {
		return Token{}, invalidInput("nodeId", err)
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < 0 || ttl > MaxTTL {
		return Token{}, errcode.Newf(errcode.InvalidInput, "", map[string]string{"field": "ttlSeconds"},
			"join token: ttl %s is outside (0, %s]", ttl, MaxTTL)
	}
	role := req.Role
	if role == "" {
		role = names.RoleNode
	}
	if err := names.Role(role); err != nil {
		return Token{}, invalidInput("role", err)
	}
	if req.Pool != "" {
		if err := names.ID("pool", req.Pool); err != nil {
			return Token{}, invalidInput("pool", err)
		}
	}
	var allowed []string
	for i, k := range req.AllowedKinds {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if err := names.Kind(k); err != nil {
			return Token{}, invalidInput(fmt.Sprintf("allowedKinds[%d]", i), err)
		}
		allowed = append(allowed, k)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return Token{}, fmt.Errorf("join token: %w", err)
	}
	tok := Token{Value: TokenPrefix + base64.RawURLEncoding.EncodeToString(raw), NodeID: req.NodeID}
	// The node must exist and not be deleted: Store checks it in the
	// statement that stores the token.
	var err error
	tok.ExpiresAt, err = jointokens.Store(ctx, db, jointokens.Token{SHA256: Hash(tok.Value), TTL: ttl,
		Grant: jointokens.Grant{NodeID: req.NodeID, Role: role, AllowedKinds: allowed, Pool: req.Pool}})
	if errors.Is(err, jointokens.ErrNoNode) {
		return Token{}, fmt.Errorf("join token for %s: %w", req.NodeID, ErrNodeNotFound)
	}
	if err != nil {
		return Token{}, err
	}
	s.logger.Info("join token created", "node_id", req.NodeID, "role", role, "restricted", len(allowed) > 0, "expires_at", tok.ExpiresAt)
	return tok, nil
}

// invalidInput is the refusal of a malformed name in a token request.
func invalidInput(field string, err error) error {
	return errcode.Newf(errcode.InvalidInput, "", map[string]string{"field": field},
		"%s", strings.TrimPrefix(err.Error(), names.ErrInvalid.Error()+": "))
}

// errBadToken does not say whether the token was unknown, used or expired:
// a caller guessing tokens learns nothing.
var errBadToken = status.Error(codes.Unauthenticated, "join token is unknown, already used or expired")

// Join exchanges an unused, unexpired token and a CSR for a node certificate.
func (s *Service) Join(ctx context.Context, req *agentv1.JoinRequest) (*agentv1.JoinResponse, error) {
	if !strings.HasPrefix(req.GetToken(), TokenPrefix) {
		return nil, errBadToken
	}
	if len(req.GetCsr()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "csr is required (a PEM CERTIFICATE REQUEST for the node key)")
	}
	var (
		id   trust.Identity
		cert []byte
		tb   *agentv1.TrustBundle
	)
	if s.trust != nil {
		// Read before the token is burned: a node that joins without the
		// bundle would run unsigned commands until its first Welcome.
		var err error
		if tb, err = s.trust.Current(ctx); err != nil {
			s.logger.Error("join: reading the trust bundle", "error", err)
			return nil, status.Error(codes.Unavailable, "join: the trust bundle could not be read; retry")
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Burning is the whole check: a second join with the same token
		// waits on the row lock, then finds it used.
		g, err := jointokens.Burn(ctx, tx, Hash(req.GetToken()))
		if errors.Is(err, jointokens.ErrUnusable) {
			return errBadToken
		}
		if err != nil {
			return err
		}
		id = trust.Identity{NodeID: g.NodeID, Role: g.Role, AllowedKinds: g.AllowedKinds}
		// The token's pool is the node's label from now on.
		if g.Pool != "" {
			if err := pools.SetJoinedNodePool(ctx, tx, id.NodeID, g.Pool); err != nil {
				return err
			}
		}
		if cert, err = s.ca.IssueNode(req.GetCsr(), id); err != nil {
			return status.Errorf(codes.InvalidArgument, "%v", err)
		}
		var allowed []string
		if id.Restricted() {
			allowed = id.AllowedKinds
		}
		if err := s.queue.SetAllowedKinds(ctx, tx, id.NodeID, allowed); err != nil {
			if errcode.CodeOf(err) == errcode.NotFound {
				return status.Errorf(codes.NotFound, "node %s was deleted", id.NodeID)
			}
			return err
		}
		// Recorded in the same transaction: the new certificate supersedes
		// the node's earlier ones, whose sessions close.
		if _, err := nodecerts.Record(ctx, tx, cert); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		s.logger.Error("join failed", "error", err)
		return nil, status.Error(codes.Unavailable, "join failed; retry")
	}
	s.logger.Info("node joined", "node_id", id.NodeID, "role", id.Role, "allowed_kinds", strings.Join(id.AllowedKinds, ","), "trust_version", tb.GetVersion())
	return &agentv1.JoinResponse{NodeId: id.NodeID, Certificate: cert, Ca: s.ca.CertPEM, TrustBundle: tb}, nil
}
