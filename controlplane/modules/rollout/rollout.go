// Package rollout is the rollout module: the daemon version is desired
// state, set per pool, and the module converges the pool's nodes to it with
// daemon.upgrade. It upgrades in waves within the pool's disruption budget
// (each upgrading node holds the pool's maintenance lock, controlplane/fleet/pools,
// shared with the platform's other disruptive work), and the first node
// that rolls back stops the wave and pauses the rollout until an operator
// resumes it: its pending commands are cancelled, those in flight finish.
// A node that fails otherwise (a package refused for its digest or
// signature, a failed self-check, no news within the rejoin window) counts
// towards the rollout's maxFailures, 1 by default, which pauses it the same
// way, so a bad release is fetched by one node and not the whole pool.
// Retry (or Set with the same version and another package) sends the
// failed nodes a new command.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"

	"github.com/better-compute/commands/controlplane/commands/events"
	"github.com/better-compute/commands/controlplane/fleet/pools"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/modules"
	"github.com/better-compute/commands/internal/upgrade"
	upgrademanifest "github.com/better-compute/commands/plugins/upgrade/manifest"
	"github.com/better-compute/commands/sdk/kind"
)

// Name is the module's name and the holder of its maintenance locks.
const Name = "rollout"

// KeyPrefix starts the idempotency keys of the module's commands,
// rollout:<tenant>:<pool>:<generation>:<node>.
const KeyPrefix = "rollout:"

// The nodes' states in a rollout (rollout_nodes.state); a node without a
// row in the current generation is pending, or current once it runs the
// target.
const (
	StatePending    = "pending"
	StateUpgrading  = "upgrading"
	StateUpgraded   = "upgraded"
	StateRolledBack = "rolled-back"
	StateFailed     = "failed"
)

// Topics of the module's events.
const (
	TopicSet     = "rollout.set"
	TopicPaused  = "rollout.paused"
	TopicResumed = "rollout.resumed"
	TopicRetried = "rollout.retried"
)

// ConditionUpgradeRolledBack is the node condition of a daemon.upgrade
// whose rollback the node reported after the command had been settled
// otherwise: the command keeps its first state, the condition (and the
// rollout's rolled-back node) says what happened.
const ConditionUpgradeRolledBack = "UpgradeRolledBack"

// ReasonRejoinTimeout fails a daemon.upgrade whose new daemon said Hello
// but reported nothing (no rejoin, no rollback) within the rejoin window
// and the module's grace after it.
const ReasonRejoinTimeout = "rejoin-timeout"

// DefaultMaxFailures is how many nodes may fail before the rollout pauses.
const DefaultMaxFailures = 1

// Desired is a pool's desired daemon version and the signed release that
// daemon.upgrade carries to it.
type Desired struct {
	TenantID, Pool string
	Version        string
	PackageURL     string
	PackageSize    int64
	PackageSHA256  string
	// Release is the signed release statement (pki sign-release).
	Release      []byte
	RejoinWindow time.Duration
	// MaxFailures nodes failing (since the rollout was set, resumed or
	// retried) pause it; 0 is DefaultMaxFailures. A rollback always does.
	MaxFailures int
}

// Rollout is a pool's rollout as stored.
type Rollout struct {
	Desired
	Generation int64
	// Failures counts the nodes that failed since the rollout was set,
	// resumed or retried.
	Failures     int
	Paused       bool
	PausedReason string
	UpdatedAt    time.Time
}

// Module is the rollout module.
type Module struct {
	mc     *modules.Context
	logger hclog.Logger
	// Every is how often Run reconciles every rollout (30 s; the config's
	// modules.rollout.interval); wakes reconcile a pool at once, so Set and
	// Resume wait for the next pass at most this long.
	Every time.Duration
	// RejoinGrace is how long after the rejoin window an upgrade whose new
	// daemon said Hello may stay without news before the module fails it
	// with rejoin-timeout (DefaultRejoinGrace): the helper's rollback and
	// the old daemon's report come within it.
	RejoinGrace time.Duration
}

// DefaultEvery is the module's pass; DefaultRejoinGrace its grace after a
// rejoin window.
const (
	DefaultEvery       = 30 * time.Second
	DefaultRejoinGrace = 2 * time.Minute
)

var (
	_ modules.Module       = (*Module)(nil)
	_ modules.KindProvider = (*Module)(nil)
	_ modules.Waker        = (*Module)(nil)
	_ modules.Runner       = (*Module)(nil)
	_ modules.Initializer  = (*Module)(nil)
)

// New builds the module; the module host hands it its context (the
// database and the command queue, through the module API) when it loads it
// (Init).
func New(logger hclog.Logger) *Module {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Module{logger: logger.Named(Name), Every: DefaultEvery, RejoinGrace: DefaultRejoinGrace}
}

// Init keeps the module's context: its wakes and its loop reach the
// database and the queue through it.
func (m *Module) Init(mc *modules.Context) error {
	m.mc = mc
	return nil
}

// Name is "rollout".
func (m *Module) Name() string { return Name }

// Kinds registers daemon.upgrade: the spec gives it to the rollout module.
func (m *Module) Kinds() []kind.Manifest { return []kind.Manifest{upgrademanifest.Manifest} }

// Prefixes are the keys it owns.
func (m *Module) Prefixes() []string { return []string{KeyPrefix} }

func invalid(field, format string, args ...any) error {
	return &errcode.Error{Code: errcode.InvalidInput, Reason: "invalid-" + field, Message: fmt.Sprintf(format, args...), Details: map[string]string{"field": field}}
}

// Validate names the field that is wrong.
func (d Desired) Validate() error {
	if err := pools.CheckName(d.Pool); err != nil {
		return err
	}
	if err := upgrade.ValidVersion(d.Version); err != nil {
		return invalid("version", "%v", err)
	}
	if !strings.HasPrefix(d.PackageURL, "https://") && !strings.HasPrefix(d.PackageURL, "http://") && !strings.HasPrefix(d.PackageURL, "file://") {
		return invalid("packageUrl", "packageUrl %q must be an http, https or file URL", d.PackageURL)
	}
	if d.PackageSize <= 0 {
		return invalid("packageSize", "packageSize %d must be positive", d.PackageSize)
	}
	if len(d.PackageSHA256) != 64 || strings.Trim(d.PackageSHA256, "0123456789abcdef") != "" {
		return invalid("packageSha256", "packageSha256 must be 64 lower-case hex digits")
	}
	if len(d.Release) == 0 {
		return invalid("release", "release is the signed release statement (better-compute pki sign-release)")
	}
	if d.RejoinWindow != 0 && (d.RejoinWindow < 10*time.Second || d.RejoinWindow > 30*time.Minute) {
		return invalid("rejoinWindowSeconds", "rejoinWindowSeconds must be 10 to 1800")
	}
	if d.MaxFailures < 0 || d.MaxFailures > 100000 {
		return invalid("maxFailures", "maxFailures %d must be 1 to 100000 (0 for the default, %d)", d.MaxFailures, DefaultMaxFailures)
	}
	return nil
}

const rolloutColumns = `tenant_id, pool, generation, target_version, package_url, package_size, package_sha256, release,
  rejoin_window_seconds, paused, paused_reason, updated_at, max_failures, failures`

func scanRollout(row pgx.Row) (Rollout, error) {
	var r Rollout
	var win int
	err := row.Scan(&r.TenantID, &r.Pool, &r.Generation, &r.Version, &r.PackageURL, &r.PackageSize, &r.PackageSHA256, &r.Release,
		&win, &r.Paused, &r.PausedReason, &r.UpdatedAt, &r.MaxFailures, &r.Failures)
	r.RejoinWindow = time.Duration(win) * time.Second
	return r, err
}

func notFound(tenantID, pool string) error {
	return &errcode.Error{Code: errcode.NotFound, Reason: "rollout-not-found", Message: "pool " + pool + " has no desired daemon version (better-compute rollout set)",
		Details: map[string]string{"tenantId": tenantID, "pool": pool}}
}

// Get returns a pool's rollout.
func Get(ctx context.Context, db store.DBTX, tenantID, pool string) (Rollout, error) {
	r, err := scanRollout(db.QueryRow(ctx, `SELECT `+rolloutColumns+` FROM rollouts WHERE tenant_id = $1 AND pool = $2`, tenantID, pool))
	if errors.Is(err, pgx.ErrNoRows) {
		return Rollout{}, notFound(tenantID, pool)
	}
	if err != nil {
		return Rollout{}, fmt.Errorf("reading the rollout of %s: %w", pool, err)
	}
	return r, nil
}

// Set stores d as the pool's desired version in tx. A new version starts a
// new generation (every node pending again, the rollout running); the same
// version keeps the generation and its progress, and with another package
// digest (a fixed package) it retries the nodes that failed or rolled back.
func Set(ctx context.Context, tx pgx.Tx, d Desired, by string) (Rollout, error) {
	if err := d.Validate(); err != nil {
		return Rollout{}, err
	}
	if d.RejoinWindow == 0 {
		d.RejoinWindow = 5 * time.Minute
	}
	if d.MaxFailures == 0 {
		d.MaxFailures = DefaultMaxFailures
	}
	prev, err := scanRollout(tx.QueryRow(ctx, `SELECT `+rolloutColumns+` FROM rollouts WHERE tenant_id = $1 AND pool = $2 FOR UPDATE`, d.TenantID, d.Pool))
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Rollout{}, fmt.Errorf("locking the rollout of %s: %w", d.Pool, err)
	}
	newGen := exists && prev.Version != d.Version
	retry := exists && prev.Version == d.Version && prev.PackageSHA256 != d.PackageSHA256
	r, err := scanRollout(tx.QueryRow(ctx, `
		INSERT INTO rollouts (tenant_id, pool, target_version, package_url, package_size, package_sha256, release, rejoin_window_seconds, max_failures)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant_id, pool) DO UPDATE SET
		  generation = rollouts.generation + CASE WHEN $10 THEN 1 ELSE 0 END,
		  paused = CASE WHEN $10 OR $11 THEN false ELSE rollouts.paused END,
		  paused_reason = CASE WHEN $10 OR $11 THEN '' ELSE rollouts.paused_reason END,
		  failures = CASE WHEN $10 OR $11 THEN 0 ELSE rollouts.failures END,
		  target_version = $3, package_url = $4, package_size = $5, package_sha256 = $6, release = $7,
		  rejoin_window_seconds = $8, max_failures = $9, updated_at = now()
		RETURNING `+rolloutColumns, d.TenantID, d.Pool, d.Version, d.PackageURL, d.PackageSize, d.PackageSHA256, d.Release,
		int(d.RejoinWindow/time.Second), d.MaxFailures, newGen, retry))
	if err != nil {
		return Rollout{}, fmt.Errorf("storing the rollout of %s: %w", d.Pool, err)
	}
	if err := writeEvent(ctx, tx, r.TenantID, TopicSet, map[string]any{"pool": r.Pool, "version": r.Version, "generation": r.Generation,
		"packageSha256": r.PackageSHA256, "maxFailures": r.MaxFailures, "by": by}); err != nil {
		return Rollout{}, err
	}
	if !retry {
		return r, nil
	}
	n, err := retryNodes(ctx, tx, r, "")
	if err != nil {
		return Rollout{}, err
	}
	return r, writeEvent(ctx, tx, r.TenantID, TopicRetried, map[string]any{"pool": r.Pool, "version": r.Version, "nodes": n,
		"why": "a new package for the same version (sha256 " + r.PackageSHA256 + ")", "by": by})
}

// Pause stops new upgrades in the pool (in-flight ones finish).
func Pause(ctx context.Context, tx pgx.Tx, tenantID, pool, reason string) (Rollout, error) {
	return setPaused(ctx, tx, tenantID, pool, true, reason)
}

// Resume lets the rollout go on and clears its failure count; nodes that
// failed or rolled back stay as they are until Retry (the node itself
// refuses a skipped target), the others are upgraded.
func Resume(ctx context.Context, tx pgx.Tx, tenantID, pool, by string) (Rollout, error) {
	return setPaused(ctx, tx, tenantID, pool, false, "resumed by "+by)
}

func setPaused(ctx context.Context, tx pgx.Tx, tenantID, pool string, paused bool, reason string) (Rollout, error) {
	if !paused {
		// Resuming clears the pause's reason.
		reason = ""
	}
	// Resuming starts counting the failures again.
	r, err := scanRollout(tx.QueryRow(ctx, `UPDATE rollouts SET paused = $3, paused_reason = $4, updated_at = now(),
		failures = CASE WHEN $3 THEN failures ELSE 0 END
		WHERE tenant_id = $1 AND pool = $2 RETURNING `+rolloutColumns, tenantID, pool, paused, reason))
	if errors.Is(err, pgx.ErrNoRows) {
		return Rollout{}, notFound(tenantID, pool)
	}
	if err != nil {
		return Rollout{}, fmt.Errorf("pausing the rollout of %s: %w", pool, err)
	}
	topic := TopicResumed
	if paused {
		topic = TopicPaused
	}
	return r, writeEvent(ctx, tx, tenantID, topic, map[string]any{"pool": pool, "version": r.Version, "reason": reason})
}

func writeEvent(ctx context.Context, tx pgx.Tx, tenantID, topic string, payload map[string]any) error {
	payload["module"] = Name
	return events.Write(ctx, tx, tenantID, topic, payload)
}

// Key is a node's command key in a generation, with :<attempt> appended
// from the second attempt (the same key would return the first command).
func Key(tenantID, pool string, generation int64, nodeID string, attempt int) string {
	k := KeyPrefix + tenantID + ":" + pool + ":" + strconv.FormatInt(generation, 10) + ":" + nodeID
	if attempt > 1 {
		k += ":" + strconv.Itoa(attempt)
	}
	return k
}

func parseKey(key string) (tenantID, pool string, generation int64, nodeID string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(key, KeyPrefix), ":")
	if (len(parts) != 4 && len(parts) != 5) || !strings.HasPrefix(key, KeyPrefix) {
		return "", "", 0, "", false
	}
	g, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return "", "", 0, "", false
	}
	return parts[0], parts[1], g, parts[3], true
}

// lockID is the maintenance lock's remediation id for a node's upgrade.
func lockID(generation int64, nodeID string) string {
	return "rollout-" + strconv.FormatInt(generation, 10) + "-" + nodeID
}

// payload is daemon.upgrade's payload for a node; retrySkipped for one
// that rolled back to this target before and is retried.
func (r Rollout) payload(retrySkipped bool) (json.RawMessage, error) {
	p := map[string]any{
		"targetVersion": r.Version, "release": r.Release, "rejoinWindowSeconds": int(r.RejoinWindow / time.Second),
		"package": map[string]any{"url": r.PackageURL, "size": r.PackageSize, "sha256": r.PackageSHA256},
	}
	if retrySkipped {
		p["retrySkipped"] = true
	}
	return json.Marshal(p)
}
