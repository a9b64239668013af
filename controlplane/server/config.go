package server

import "github.com/better-compute/commands/controlplane/server/serverconfig"

// The server's configuration is serverconfig's, a leaf package that operator
// tools read without linking the server; these names keep server.Config the
// one type that New takes.
type (
	// Config is the server's config file (YAML); flags override its fields.
	Config = serverconfig.Config
	// GatewayConfig is the node-facing listener's settings.
	GatewayConfig = serverconfig.GatewayConfig
	// SweeperConfig is the command sweeper's settings.
	SweeperConfig = serverconfig.SweeperConfig
	// TLSConfig is the API's transport security.
	TLSConfig = serverconfig.TLSConfig
	// HTTPTLSConfig is the HTTP listener's certificate and key.
	HTTPTLSConfig = serverconfig.HTTPTLSConfig
	// SecretsConfig is where the secrets' at-rest key is.
	SecretsConfig = serverconfig.SecretsConfig
	// BrowserConfig is the API for browsers and the console on the HTTP listener.
	BrowserConfig = serverconfig.BrowserConfig
	// Duration is a time.Duration read from a Go duration string.
	Duration = serverconfig.Duration
)

// Defaults.
const (
	DefaultGRPCListen      = serverconfig.DefaultGRPCListen
	DefaultHTTPListen      = serverconfig.DefaultHTTPListen
	DefaultShutdownTimeout = serverconfig.DefaultShutdownTimeout
	DefaultGatewayListen   = serverconfig.DefaultGatewayListen
)

// DefaultConfig is the configuration without a file.
func DefaultConfig() Config { return serverconfig.DefaultConfig() }

// LoadConfig reads path over DefaultConfig; unknown keys are errors.
func LoadConfig(path string) (Config, error) { return serverconfig.LoadConfig(path) }
