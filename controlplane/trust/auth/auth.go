package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
)

// Authenticator maps a bearer token or a verified client certificate to an
// Identity. Its identities can be replaced while it serves (Reload), so that
// an operator rotates a token without a restart.
type Authenticator struct {
	// ids holds the current identities; calls read it once each.
	ids atomic.Pointer[identities]
	// public are the services served without authentication (server
	// reflection and health), which reveal only what the proto files say.
	public map[string]bool
}

// identities are the lookup tables built from one Config.
type identities struct {
	byToken    map[[sha256.Size]byte]*Identity
	byCertHash map[[sha256.Size]byte]*Identity
	byCN       map[string]*Identity
}

// New builds an Authenticator from cfg.
func New(cfg *Config) (*Authenticator, error) {
	ids, err := build(cfg)
	if err != nil {
		return nil, err
	}
	a := &Authenticator{public: map[string]bool{}}
	a.ids.Store(ids)
	return a, nil
}

// Reload replaces the identities with cfg's; calls already authenticated
// keep the identity they got. A bad cfg changes nothing.
func (a *Authenticator) Reload(cfg *Config) error {
	ids, err := build(cfg)
	if err != nil {
		return err
	}
	a.ids.Store(ids)
	return nil
}

func build(cfg *Config) (*identities, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &identities{
		byToken:    map[[sha256.Size]byte]*Identity{},
		byCertHash: map[[sha256.Size]byte]*Identity{},
		byCN:       map[string]*Identity{},
	}
	for _, ic := range cfg.Identities {
		id := &Identity{Name: ic.Name, Tenants: append([]string(nil), ic.Tenants...), Grants: append([]Grant(nil), ic.Grants...), Agent: ic.Agent}
		for _, t := range ic.Tokens {
			if err := a.addHash(a.byToken, sha256.Sum256([]byte(t)), id, "token"); err != nil {
				return nil, err
			}
		}
		for _, h := range ic.TokenSHA256 {
			if err := a.addHash(a.byToken, mustDigest(h), id, "token"); err != nil {
				return nil, err
			}
		}
		for _, h := range ic.CertSHA256 {
			if err := a.addHash(a.byCertHash, mustDigest(h), id, "certificate"); err != nil {
				return nil, err
			}
		}
		for _, cn := range ic.CertCommonNames {
			if prev, ok := a.byCN[cn]; ok {
				return nil, fmt.Errorf("certificate common name %q names both %s and %s", cn, prev.Name, id.Name)
			}
			a.byCN[cn] = id
		}
	}
	return a, nil
}

func (a *identities) addHash(m map[[sha256.Size]byte]*Identity, h [sha256.Size]byte, id *Identity, what string) error {
	if prev, ok := m[h]; ok {
		return fmt.Errorf("one %s names both %s and %s", what, prev.Name, id.Name)
	}
	m[h] = id
	return nil
}

// mustDigest decodes a digest that Validate has already checked.
func mustDigest(h string) [sha256.Size]byte {
	var d [sha256.Size]byte
	b, _ := hex.DecodeString(h)
	copy(d[:], b)
	return d
}

// AllowUnauthenticated serves the named gRPC services ("grpc.health.v1.Health")
// without credentials. Call it before the server starts serving.
func (a *Authenticator) AllowUnauthenticated(services ...string) {
	for _, s := range services {
		a.public["/"+s+"/"] = true
	}
}

func (a *Authenticator) isPublic(fullMethod string) bool {
	if i := strings.LastIndex(fullMethod, "/"); i >= 0 {
		return a.public[fullMethod[:i+1]]
	}
	return false
}

// Authenticate returns the caller's identity: from the bearer token in the
// authorization metadata when there is one (a bad token is never passed over
// for the certificate), else from the verified client certificate.
func (a *Authenticator) Authenticate(ctx context.Context) (*Identity, error) {
	ids := a.ids.Load()
	md, _ := metadata.FromIncomingContext(ctx)
	if vals := md.Get("authorization"); len(vals) > 0 {
		scheme, token, ok := strings.Cut(vals[0], " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
			return nil, apierr.Errorf(errcode.Unauthenticated, "authorization must be \"Bearer <token>\"")
		}
		if id, found := ids.byToken[sha256.Sum256([]byte(token))]; found {
			return id, nil
		}
		return nil, apierr.Errorf(errcode.Unauthenticated, "unknown bearer token")
	}
	if cert := verifiedLeaf(ctx); cert != nil {
		if id, found := ids.byCertHash[sha256.Sum256(cert.Raw)]; found {
			return id, nil
		}
		if id, found := ids.byCN[cert.Subject.CommonName]; found {
			return id, nil
		}
		return nil, apierr.Errorf(errcode.Unauthenticated, "client certificate %q names no identity", cert.Subject.CommonName)
	}
	return nil, apierr.Errorf(errcode.Unauthenticated, "no credentials: send a bearer token or a client certificate")
}

// verifiedLeaf returns the client certificate only when the TLS handshake
// verified it against the client CA; an unverified one proves nothing.
func verifiedLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return ti.State.VerifiedChains[0][0]
}

type ctxKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity that the interceptors put into ctx.
func FromContext(ctx context.Context) (*Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(*Identity)
	return id, ok && id != nil
}

// UnaryInterceptor authenticates every unary call that is not public.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if a.isPublic(info.FullMethod) {
			return handler(ctx, req)
		}
		id, err := a.Authenticate(ctx)
		if err != nil {
			return nil, err
		}
		return handler(NewContext(ctx, id), req)
	}
}

// StreamInterceptor authenticates every stream that is not public.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if a.isPublic(info.FullMethod) {
			return handler(srv, ss)
		}
		id, err := a.Authenticate(ss.Context())
		if err != nil {
			return err
		}
		return handler(srv, &identityStream{ServerStream: ss, ctx: NewContext(ss.Context(), id)})
	}
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }
