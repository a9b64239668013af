// Package serverconfig is bc-server's config file: its fields, defaults and
// loading. It is a leaf (auth and bundles settings, no database, no
// gateway), so operator tools such as the better-compute CLI read the same
// file as the server without linking the server.
package serverconfig

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"

	"github.com/better-compute/commands/controlplane/commands/bundles"
	"github.com/better-compute/commands/controlplane/trust/auth"
)

// Config is the server's config file (YAML); flags override its fields.
type Config struct {
	// GRPCListen is the API's address (":7443").
	GRPCListen string `yaml:"grpcListen"`
	// HTTPListen serves /healthz, /readyz and /metrics (":9464"), and a dir
	// blob store's uploads; "" turns it off.
	HTTPListen string `yaml:"httpListen"`
	// HTTPTLS serves HTTPListen over TLS (HTTPS) when it names a
	// certificate and key: nodes then upload support bundles to an
	// https:// baseURL, and metrics scrapes travel encrypted.
	HTTPTLS HTTPTLSConfig `yaml:"httpTls"`
	// DatabaseURL is a PostgreSQL URL or DSN; "" reads the PG* variables.
	DatabaseURL string `yaml:"databaseUrl"`
	// MaxConns sizes the database pool; 0 picks 4 per CPU, at least 8.
	MaxConns int32 `yaml:"maxConns"`
	// TLS is the API's transport security; without a certificate the API
	// is plaintext, for loopback and tests.
	TLS TLSConfig `yaml:"tls"`
	// Auth lists the identities; AuthFile reads them from another file.
	Auth     auth.Config `yaml:"auth"`
	AuthFile string      `yaml:"authFile"`
	// KindsDir holds third-party kind manifests (*.json, *.yaml).
	KindsDir string `yaml:"kindsDir"`
	// Allowlist overrides the kinds commands.run accepts.
	Allowlist []string `yaml:"allowlist"`
	// BatchQuorum says approver keys are configured: destructive kinds need
	// an approved batch, and batched commands wait for approval.
	BatchQuorum bool `yaml:"batchQuorum"`
	// SupportBundles is where logs.collect uploads; without it commands.run
	// refuses logs.collect. A dir store is served on the HTTP listener under
	// its baseURL's path.
	SupportBundles *bundles.Config `yaml:"supportBundles"`
	// Secrets turns on secretRefs: the Secrets API and the node exchange.
	// Without it a command may still name secretRefs, and the node's
	// exchange fails with secrets-unavailable.
	Secrets *SecretsConfig `yaml:"secrets"`
	// ShutdownTimeout bounds the graceful stop ("15s").
	ShutdownTimeout Duration `yaml:"shutdownTimeout"`
	// LogLevel is trace, debug, info, warn or error.
	LogLevel string `yaml:"logLevel"`
	// LogJSON writes logs as JSON.
	LogJSON bool `yaml:"logJson"`
	// Gateway is where nodes join and hold their sessions; off when its
	// listen address is empty.
	Gateway GatewayConfig `yaml:"gateway"`
	// Sweeper enforces the commands' deadlines (once in the fleet).
	Sweeper SweeperConfig `yaml:"sweeper"`
	// History is the command history's retention: settled commands, their
	// events and River's finished jobs past it are archived to the
	// supportBundles store, then deleted (off unless retentionDays is set).
	History HistoryConfig `yaml:"history"`
	// PKI is command signing and the destructive-batch quorum's keys.
	PKI PKIConfig `yaml:"pki"`
	// MaxWatchesPerIdentity bounds the event watches one identity holds open
	// on this server (16 when 0; negative: no bound): each watch costs
	// every other caller some of the database.
	MaxWatchesPerIdentity int `yaml:"maxWatchesPerIdentity"`
	// Components are the parts this process runs: api, gateway, sweeper,
	// modules (all four when empty; modules runs beside api). A gateway-only process reads no signing key:
	// it relays the signed bytes the API stored.
	Components []string `yaml:"components"`
	// Modules configures the platform's own modules (remediation,
	// reconciler).
	Modules ModulesConfig `yaml:"modules"`
	// Tracing exports the commands' spans (commands.run, enqueue, dispatch,
	// settle) over OTLP/gRPC; off when tracing.otlpEndpoint is empty.
	Tracing TracingConfig `yaml:"tracing"`
	// Browser is the public API in the forms browsers call (the Connect
	// protocol and gRPC-Web) and the web console, both on HTTPListen.
	Browser BrowserConfig `yaml:"browser"`
	// TracerProvider, when set, is used instead of Tracing's exporter
	// (tests record spans in memory with it). Never read from the file.
	TracerProvider trace.TracerProvider `yaml:"-"`
}

// ModulesConfig configures the control plane's own modules: the provision
// module's GPU-reset remediation and the health reconciler. They run in the
// process that runs the modules component.
type ModulesConfig struct {
	// Interval is their level-triggered pass ("5s"); a settled command
	// wakes its remediation at once.
	Interval Duration `yaml:"interval"`
	// StaleAfter skips nodes whose session was not seen for longer ("90s").
	StaleAfter Duration `yaml:"staleAfter"`
	// VerifyTimeout bounds the wait for a reboot's outcome ("5m").
	VerifyTimeout Duration `yaml:"verifyTimeout"`
	// MaxRemediationsPerWeek remediations of one node within 7 days
	// escalate to a hardware ticket instead of another try (5).
	MaxRemediationsPerWeek int `yaml:"maxRemediationsPerWeek"`
	// Remediation is the provision module's remediation (gpu.reset for
	// RowRemapPending once no allocation is live). Off unless enabled: it
	// resets GPUs on its own.
	Remediation ModuleSwitch `yaml:"remediation"`
	// Reconciler is the health reconciler (RebootRequired and the XID
	// rules). Off unless enabled: it reboots nodes on its own.
	Reconciler ModuleSwitch `yaml:"reconciler"`
	// Cooldown keeps what a remediation just finished on (the
	// reconciler's node, the provision module's GPU) from being planned
	// again at once, while the node's reports catch up ("5m").
	Cooldown Duration `yaml:"cooldown"`
	// Rollout tunes the rollout module.
	Rollout RolloutConfig `yaml:"rollout"`
}

// RolloutConfig tunes the rollout module (daemon.upgrade by pool).
type RolloutConfig struct {
	// Interval is its pass ("30s"): a rollout set, resumed or retried, and
	// a node that joined the pool, wait for it at most this long; a node's
	// outcome starts the next wave at once.
	Interval Duration `yaml:"interval"`
	// RejoinGrace is how long past the rejoin window an upgrade whose new
	// daemon said Hello may stay without news before it fails
	// rejoin-timeout ("2m").
	RejoinGrace Duration `yaml:"rejoinGrace"`
}

// ModuleSwitch turns a module on.
type ModuleSwitch struct {
	Enabled bool `yaml:"enabled"`
}

// TracingConfig is where the server's spans go.
type TracingConfig struct {
	// OTLPEndpoint is the OTLP/gRPC collector: host:port (TLS),
	// http://host:port (plaintext) or https://host:port; "" turns tracing off.
	OTLPEndpoint string `yaml:"otlpEndpoint"`
}

// BrowserConfig is the API for browsers and the web console on the HTTP
// listener. The API there is the gRPC API itself, transcoded: the same
// methods, authentication, authorization and limits.
type BrowserConfig struct {
	// Disabled serves neither the API for browsers nor the console.
	Disabled bool `yaml:"disabled"`
	// CORSOrigins are the origins (https://ops.example.com) whose pages
	// may call the API across origins; empty: none (CORS off), which the
	// console, served from the same origin, does not need.
	CORSOrigins []string `yaml:"corsOrigins"`
}

// The components a process can run.
const (
	ComponentAPI     = "api"
	ComponentGateway = "gateway"
	ComponentSweeper = "sweeper"
	// ComponentModules runs the modules' loops and River's workers (their
	// durable owner wakes and jobs). It queues commands, which the api
	// component's signing key signs, so it runs beside api.
	ComponentModules = "modules"
)

// Runs reports whether the process runs component c.
func (c Config) Runs(component string) bool {
	if len(c.Components) == 0 {
		return true
	}
	for _, x := range c.Components {
		if x == component {
			return true
		}
	}
	return false
}

// ValidateComponents checks that every component named is known.
func (c Config) ValidateComponents() error {
	for _, x := range c.Components {
		switch x {
		case ComponentAPI, ComponentGateway, ComponentSweeper, ComponentModules:
		default:
			return fmt.Errorf("components: unknown component %q (api, gateway, sweeper, modules)", x)
		}
	}
	if c.Runs(ComponentModules) && !c.Runs(ComponentAPI) {
		return fmt.Errorf("components: modules runs beside api (the modules queue commands that the api component's key signs): add api or drop modules")
	}
	return nil
}

// PKIConfig is the command-signing authority and the quorum's keys.
type PKIConfig struct {
	// CommandSigning is the command-signing root's private key (PEM, from
	// better-compute pki create-root). With it every command and node spec
	// is signed, and nodes get a trust bundle; without it commands go
	// unsigned, as in v0.1. Only processes running the api component read it.
	CommandSigning string `yaml:"commandSigning"`
	// CreateCommandSigning makes the root at CommandSigning at start when
	// that file does not exist and no trust bundle was ever published (the
	// packaged config's first start): 0600, owned by the server's user, its
	// public key beside it. A bundle already published means nodes trust
	// another root, so bc-server then refuses to start rather than make a
	// second one. Never overwrites.
	CreateCommandSigning bool `yaml:"createCommandSigning"`
	// CommandSigningRoots are more roots' public keys (PEM files) that the
	// trust bundle carries during a rotation.
	CommandSigningRoots []string `yaml:"commandSigningRoots"`
	// ReleaseKeys are the bcd release keys' public keys (PEM files): the
	// trust bundle carries them, and a node installs a daemon.upgrade
	// package only when one of them signed its release statement.
	ReleaseKeys []string `yaml:"releaseKeys"`
	// TrustVersion is the lowest trust bundle version to publish: the
	// version follows the bundle's content and never goes below it.
	TrustVersion int64 `yaml:"trustVersion"`
	// WorkerKeyLifetime is how long a worker key's certificate lasts (24h,
	// at most); it is renewed at half its life.
	WorkerKeyLifetime Duration `yaml:"workerKeyLifetime"`
	// Approvers are the destructive-batch approver keys.
	Approvers []ApproverConfig `yaml:"approvers"`
	// ApprovalThreshold is how many distinct approvers a batch needs (all
	// of them when 0).
	ApprovalThreshold int `yaml:"approvalThreshold"`
	// UnbatchedDestructivePerHour is the break-glass allowance: how many
	// destructive commands outside a batch a node runs per hour.
	UnbatchedDestructivePerHour int `yaml:"unbatchedDestructivePerHour"`
	// PlatformApproverKey is the platform's own approver key (an Ed25519
	// private key, PEM) whose public key is one of Approvers: the platform
	// then signs the batches of its own destructive work (the provision
	// module's resets, the health reconciler's reboots) as one approval,
	// and people approve the rest of the quorum. Without it, platform
	// batches wait for people, like everyone's. Either way the approval is
	// a batch approval row and an event.
	PlatformApproverKey string `yaml:"platformApproverKey"`
}

// ApproverConfig is one approver key.
type ApproverConfig struct {
	// Name says whose key it is (shown to approvers and in audits).
	Name string `yaml:"name"`
	// PublicKey is the approver's public key file (PEM).
	PublicKey string `yaml:"publicKey"`
}

// GatewayConfig is the node-facing listener: bc.agent.v1.Session (mTLS with
// a node certificate) and bc.agent.v1.Join (server-auth TLS: a joining node
// has no certificate yet), both on one port.
type GatewayConfig struct {
	// Listen is the gateway's address (":7444"); "" turns the gateway off.
	Listen string `yaml:"listen"`
	// Name names this gateway in the node rows of the sessions it holds
	// (nodes.get and nodes.list show it) and in the gateways table; the
	// host name when empty. Give each gateway of one host a name of its
	// own.
	Name string `yaml:"name"`
	// CADir holds the node CA (ca.pem, ca-key.pem), created if missing.
	CADir string `yaml:"caDir"`
	// ServerHosts are the DNS names and IPs in the gateway's serving
	// certificate, issued by the node CA at start (localhost and 127.0.0.1
	// when empty).
	ServerHosts []string `yaml:"serverHosts"`
	// Poll is the dispatch fallback when no NOTIFY arrives (2s).
	Poll Duration `yaml:"poll"`
	// CancelResend is how often Cancel is resent until a terminal report (2s).
	CancelResend Duration `yaml:"cancelResend"`
	// BusyBackoffMin and BusyBackoffMax bound BUSY's backoff (1s, 30s).
	BusyBackoffMin Duration `yaml:"busyBackoffMin"`
	BusyBackoffMax Duration `yaml:"busyBackoffMax"`
	// Shed tunes how gateways on one database even out their sessions
	// (gateway.ShedOptions).
	Shed ShedConfig `yaml:"shed"`
}

// ShedConfig is gateway.ShedOptions in the configuration file: every
// Every the gateway records how many sessions it holds, and when it holds
// more than Above times the mean over the live gateways (and at least
// Least more) in two rounds in a row, it ends half of what it holds beyond
// the mean, at most Most a round (0: a tenth of those held); their nodes
// reconnect through the load balancer.
type ShedConfig struct {
	// Off keeps this gateway from ending sessions (it still records its
	// count for the others).
	Off   bool     `yaml:"off"`
	Every Duration `yaml:"every"`
	Above float64  `yaml:"above"`
	Least int      `yaml:"least"`
	Most  int      `yaml:"most"`
}

// SweeperConfig tunes the CommandSweeper.
type SweeperConfig struct {
	// Interval is how often the leader sweeps (5s).
	Interval Duration `yaml:"interval"`
	// Disabled keeps this replica out of the election.
	Disabled bool `yaml:"disabled"`
}

// HistoryConfig is the history retention (controlplane/commands/history). It runs
// in the processes that run the sweeper component, one at a time under the
// history-archiver lease, and needs supportBundles: the archive goes there.
type HistoryConfig struct {
	// RetentionDays keeps settled history this many days in the database;
	// 0 (the default) keeps it forever and archives nothing.
	RetentionDays int `yaml:"retentionDays"`
	// Tenants overrides RetentionDays per tenant id (0: keep forever).
	Tenants map[string]TenantHistory `yaml:"tenants"`
	// Interval is how often the archiver looks for expired hours ("10m").
	Interval Duration `yaml:"interval"`
	// Batch bounds the rows of one DELETE (500).
	Batch int `yaml:"batch"`
}

// TenantHistory is one tenant's retention.
type TenantHistory struct {
	RetentionDays int `yaml:"retentionDays"`
}

// Options are the shed settings as the gateway takes them, checked: a
// value that would never shed, or shed on every round, is refused rather
// than silently replaced by the default.
func (s ShedConfig) Options() (every time.Duration, above float64, err error) {
	if s.Every < 0 || s.Least < 0 || s.Most < 0 {
		return 0, 0, errors.New("gateway.shed: every, least and most must not be negative")
	}
	if s.Every != 0 && time.Duration(s.Every) < time.Second {
		return 0, 0, fmt.Errorf("gateway.shed.every: %s is too often (each round writes the database); use 1s or more, such as 10s (the default)", time.Duration(s.Every))
	}
	if s.Above != 0 && (math.IsNaN(s.Above) || math.IsInf(s.Above, 0) || s.Above <= 1) {
		return 0, 0, fmt.Errorf("gateway.shed.above: %g would shed sessions from a gateway holding its share or less; use a factor above 1, such as 1.1 (the default)", s.Above)
	}
	return time.Duration(s.Every), s.Above, nil
}

// Policy is the retention per tenant, checked.
func (h HistoryConfig) Policy() (days int, tenants map[string]int, err error) {
	if h.RetentionDays < 0 || h.Batch < 0 {
		return 0, nil, errors.New("history: retentionDays and batch must not be negative")
	}
	tenants = map[string]int{}
	for id, t := range h.Tenants {
		if t.RetentionDays < 0 {
			return 0, nil, fmt.Errorf("history.tenants.%s.retentionDays: must not be negative", id)
		}
		tenants[id] = t.RetentionDays
	}
	return h.RetentionDays, tenants, nil
}

// HTTPTLSConfig names the HTTP listener's certificate and key (PEM files);
// both or neither.
type HTTPTLSConfig struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// TLSConfig names PEM files.
type TLSConfig struct {
	// Cert and Key are the server's certificate and key.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ClientCA verifies client certificates (mTLS); clients without one
	// may still use a bearer token.
	ClientCA string `yaml:"clientCa"`
}

// Duration reads "15s" from YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("duration %q: %w", n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes a Go duration string, so that a config written out
// (a test's, a tool's) reads back as it was.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Defaults.
const (
	DefaultGRPCListen      = ":7443"
	DefaultHTTPListen      = ":9464"
	DefaultShutdownTimeout = 15 * time.Second
	DefaultGatewayListen   = ":7444"
)

// DefaultConfig is the configuration without a file.
func DefaultConfig() Config {
	return Config{
		GRPCListen: DefaultGRPCListen, HTTPListen: DefaultHTTPListen,
		ShutdownTimeout: Duration(DefaultShutdownTimeout), LogLevel: "info",
	}
}

// LoadConfig reads path over DefaultConfig. Unknown keys are errors, so a
// misspelt setting never silently keeps its default.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// AuthConfig returns the identities: AuthFile when set, else Auth.
func (c Config) AuthConfig() (*auth.Config, error) {
	if c.AuthFile != "" {
		if len(c.Auth.Identities) > 0 {
			return nil, errors.New("config sets both auth and authFile")
		}
		return auth.LoadConfig(c.AuthFile)
	}
	a := c.Auth
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return &a, nil
}

// SecretsConfig is where the secrets' at-rest key is.
type SecretsConfig struct {
	// KeyFile holds the 32-byte AES-256-GCM key (raw, hex or base64),
	// mode 0600: `head -c 32 /dev/urandom > secrets.key`.
	KeyFile string `yaml:"keyFile"`
}
