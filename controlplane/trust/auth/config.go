// Package auth authenticates API callers (a bearer token or an mTLS client
// certificate) and authorises them against the grants in the config file.
//
// An identity belongs to tenants and holds grants: a permission
// ("compute:nodes:exec") on a resource ("compute-node/node_…"), either of
// which may use * as a wildcard. Visibility comes before permission: a node
// outside the caller's tenants is NOT_FOUND, never PERMISSION_DENIED, so the
// API does not reveal which node ids exist elsewhere.
package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The permissions the API checks.
const (
	// PermNodesExec runs and cancels commands on a node.
	PermNodesExec = "compute:nodes:exec"
	// PermNodesRead reads a node and its commands.
	PermNodesRead = "compute:nodes:read"
	// PermNodesCreate registers nodes.
	PermNodesCreate = "compute:nodes:create"
	// PermNodesAdmin administers a node: join tokens, spec generations,
	// deletion.
	PermNodesAdmin = "compute:nodes:admin"
	// PermTenantsCreate registers tenants.
	PermTenantsCreate = "compute:tenants:create"
	// PermEventsRead is reserved: events.watch checks tenant visibility and
	// each event's node against PermNodesRead, not this.
	PermEventsRead = "compute:events:read"
	// PermBatchesCreate creates destructive batches (tenant/{tenantId}).
	PermBatchesCreate = "compute:batches:create"
	// PermBatchesRead reads batches (tenant/{tenantId}).
	PermBatchesRead = "compute:batches:read"
	// PermBatchesApprove uploads an approver's signature (tenant/{tenantId});
	// the key, not the grant, is what counts, and an agent never approves.
	PermBatchesApprove = "compute:batches:approve"
	// PermPoolsRead reads a pool: its budget, locks and the reconciler's
	// plan for it (compute-pool/{pool}).
	PermPoolsRead = "compute:pools:read"
	// PermPoolsAdmin sets a pool's budget, resets its breaker and moves
	// nodes into it (compute-pool/{pool}; moving a node also needs
	// compute:nodes:admin on the node).
	PermPoolsAdmin = "compute:pools:admin"
	// PermSecretsWrite puts and deletes a tenant's secrets (tenant/{tenantId}).
	PermSecretsWrite = "compute:secrets:write"
	// PermSecretsRead lists a tenant's secrets' names, never values.
	PermSecretsRead = "compute:secrets:read"
	// PermRunsRead reads every fleet run of a tenant (tenant/{tenantId});
	// a run's requester reads its own runs without it. Creating a run needs
	// no grant of its own: compute:nodes:exec on each target node.
	PermRunsRead = "compute:runs:read"
	// PermRunsAdmin pauses, resumes and cancels any fleet run of a tenant
	// (tenant/{tenantId}); a run's requester may act on its own without it.
	PermRunsAdmin = "compute:runs:admin"
)

// Permissions are the permissions the API checks, each documented with its
// methods in docs/api.md. A grant's pattern ("compute:nodes:*") grants those
// of them it matches.
var Permissions = []string{PermNodesExec, PermNodesRead, PermNodesCreate, PermNodesAdmin, PermTenantsCreate}

// NodeResource is the resource name of a node: compute-node/{nodeId}.
func NodeResource(nodeID string) string { return "compute-node/" + nodeID }

// PoolResource is the resource name of a pool: compute-pool/{pool}.
func PoolResource(pool string) string { return "compute-pool/" + pool }

// TenantResource is the resource name of a tenant: tenant/{tenantId}.
func TenantResource(tenantID string) string { return "tenant/" + tenantID }

// Grant allows one permission on the resources its pattern matches.
type Grant struct {
	// Permission is a permission or a pattern ("compute:nodes:*", "*").
	Permission string `yaml:"permission" json:"permission"`
	// Resource is a resource or a pattern ("compute-node/*"); empty means "*".
	Resource string `yaml:"resource" json:"resource"`
}

// IdentityConfig is one caller as the config file names it.
type IdentityConfig struct {
	// Name identifies the caller; it scopes idempotency keys.
	Name string `yaml:"name"`
	// Tenants are the tenant ids (or patterns; "*" for platform operators)
	// whose nodes the identity sees.
	Tenants []string `yaml:"tenants"`
	// Tokens are bearer tokens in plain text; prefer TokenSHA256 outside tests.
	Tokens []string `yaml:"tokens"`
	// TokenSHA256 are hex SHA-256 digests of bearer tokens.
	TokenSHA256 []string `yaml:"tokenSha256"`
	// CertCommonNames are client-certificate subject common names; the
	// certificate must verify against the server's client CA.
	CertCommonNames []string `yaml:"certCommonNames"`
	// CertSHA256 are hex SHA-256 digests of client certificates (DER).
	CertSHA256 []string `yaml:"certSha256"`
	// Grants are what the identity may do.
	Grants []Grant `yaml:"grants"`
	// Agent marks an agent's principal (the MCP server's): it can never
	// approve a destructive batch, whatever its grants say.
	Agent bool `yaml:"agent"`
}

// Config lists the identities.
type Config struct {
	Identities []IdentityConfig `yaml:"identities"`
}

// LoadConfig reads a YAML (or JSON) config file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading auth config: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("auth config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses and validates a YAML (or JSON) config.
func ParseConfig(b []byte) (*Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate reports every problem, each naming the identity.
func (c *Config) Validate() error {
	var errs []error
	names := map[string]bool{}
	for i, id := range c.Identities {
		where := fmt.Sprintf("identities[%d] (%s)", i, id.Name)
		if id.Name == "" {
			errs = append(errs, fmt.Errorf("%s: name is required", where))
		}
		if names[id.Name] {
			errs = append(errs, fmt.Errorf("%s: name is used twice", where))
		}
		names[id.Name] = true
		if len(id.Tenants) == 0 {
			errs = append(errs, fmt.Errorf("%s: tenants is required (use \"*\" for every tenant)", where))
		}
		if len(id.Tokens)+len(id.TokenSHA256)+len(id.CertCommonNames)+len(id.CertSHA256) == 0 {
			errs = append(errs, fmt.Errorf("%s: needs a token, tokenSha256, certCommonNames or certSha256", where))
		}
		for _, h := range append(append([]string(nil), id.TokenSHA256...), id.CertSHA256...) {
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
				errs = append(errs, fmt.Errorf("%s: %q is not a hex SHA-256 digest", where, h))
			}
		}
		for _, g := range id.Grants {
			if g.Permission == "" {
				errs = append(errs, fmt.Errorf("%s: a grant needs a permission", where))
			}
		}
	}
	return errors.Join(errs...)
}
