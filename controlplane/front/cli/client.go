package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/front/apidial"
)

// Settings say where the API is and who the caller is. Each comes from a
// flag, else an environment variable, else the config file.
type Settings struct {
	// Endpoint is host:port; an http:// prefix means plaintext, https:// TLS.
	Endpoint string `yaml:"endpoint"`
	// Token is the bearer token.
	Token string `yaml:"token"`
	// TokenFile holds the bearer token (trailing white space is dropped).
	TokenFile string `yaml:"tokenFile"`
	// Tenant fills tenantId in requests that leave it out.
	Tenant string `yaml:"tenant"`
	// CACert verifies the server (PEM); empty uses the system roots.
	CACert string `yaml:"caCert"`
	// Cert and Key are a client certificate for mTLS (PEM files).
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// Plaintext turns TLS off (loopback and tests only).
	Plaintext bool `yaml:"plaintext"`
}

// DefaultEndpoint is the endpoint when none is configured.
const DefaultEndpoint = "localhost:7443"

// envNames maps each setting to its environment variable.
var envNames = map[string]string{
	"endpoint": "BC_ENDPOINT", "token": "BC_TOKEN", "token-file": "BC_TOKEN_FILE", "tenant": "BC_TENANT",
	"ca-cert": "BC_CA_CERT", "cert": "BC_CERT", "key": "BC_KEY", "plaintext": "BC_PLAINTEXT",
}

// defaultConfigPath is ~/.config/better-compute/config.yaml.
func defaultConfigPath(getenv func(string) string) string {
	if dir := getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "better-compute", "config.yaml")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "better-compute", "config.yaml")
	}
	return ""
}

// expandHome replaces a leading "~/" (or a lone "~") with $HOME.
func expandHome(path string, getenv func(string) string) string {
	home := getenv("HOME")
	switch {
	case home == "":
		return path
	case path == "~":
		return home
	case strings.HasPrefix(path, "~/"):
		return filepath.Join(home, path[2:])
	}
	return path
}

// loadSettings merges the config file (path, or the default path when it
// exists), the environment and the flags that were set, in rising priority.
func loadSettings(path string, explicit bool, getenv func(string) string, flags Settings, set func(string) bool) (Settings, error) {
	var s Settings
	if path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			if err := yaml.Unmarshal(b, &s); err != nil {
				return s, fmt.Errorf("config file %s: %w", path, err)
			}
		case explicit || !errors.Is(err, os.ErrNotExist):
			return s, fmt.Errorf("reading config file: %w", err)
		}
	}
	pick := func(name string, dst *string, flag string) {
		if set(name) {
			*dst = flag
			return
		}
		if v := getenv(envNames[name]); v != "" {
			*dst = v
		}
	}
	pick("endpoint", &s.Endpoint, flags.Endpoint)
	pick("token", &s.Token, flags.Token)
	pick("token-file", &s.TokenFile, flags.TokenFile)
	pick("tenant", &s.Tenant, flags.Tenant)
	pick("ca-cert", &s.CACert, flags.CACert)
	pick("cert", &s.Cert, flags.Cert)
	pick("key", &s.Key, flags.Key)
	if set("plaintext") {
		s.Plaintext = flags.Plaintext
	} else if v := getenv(envNames["plaintext"]); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("%s=%q: %w", envNames["plaintext"], v, err)
		}
		s.Plaintext = b
	}
	if s.Endpoint == "" {
		s.Endpoint = DefaultEndpoint
	}
	// A path written ~/… (as the config file's example does) is under the
	// home directory: no shell expands it in a YAML file, or in
	// --token-file=~/….
	for _, p := range []*string{&s.TokenFile, &s.CACert, &s.Cert, &s.Key} {
		*p = expandHome(*p, getenv)
	}
	if s.Token == "" && s.TokenFile != "" {
		b, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return s, fmt.Errorf("reading token file: %w", err)
		}
		s.Token = strings.TrimSpace(string(b))
	}
	return s, nil
}

// dial opens a client connection with the settings' transport security and
// bearer token.
func dial(s Settings) (*grpc.ClientConn, error) {
	return apidial.Dial(apidial.Settings{Endpoint: s.Endpoint, Token: s.Token, CACert: s.CACert, Cert: s.Cert, Key: s.Key, Plaintext: s.Plaintext})
}
