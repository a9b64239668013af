package daemon

import (
	"context"
	"errors"

	"github.com/better-compute/commands/bcd/journal"
)

// reasonSecretsUnavailable fails a command whose secrets could not be
// fetched for a reason the source did not name.
const reasonSecretsUnavailable = "secrets-unavailable"

// errNoSecretSource is a daemon without a session (a local bcd exec).
var errNoSecretSource = errors.New("this bcd has no session to the control plane to fetch secrets over")

// fetchSecrets asks the secret source for rec's refs.
func (d *Daemon) fetchSecrets(ctx context.Context, rec journal.Record) (map[string][]byte, error) {
	if d.cfg.Secrets == nil {
		return nil, errNoSecretSource
	}
	return d.cfg.Secrets.Fetch(ctx, rec.ID, rec.SecretRefs)
}

// secretsReason is the failure reason of a fetch error: the source's own
// (secret-denied, secret-not-found) when it names one.
func secretsReason(err error) string {
	var r interface{ SecretReason() string }
	if errors.As(err, &r) {
		return r.SecretReason()
	}
	return reasonSecretsUnavailable
}

// wipeSecrets overwrites the values once the run is over.
func wipeSecrets(vals map[string][]byte) {
	for _, v := range vals {
		clear(v)
	}
}
