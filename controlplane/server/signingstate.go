package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/better-compute/commands/internal/trust"
)

// signingState is command signing as this process sees it. A control plane
// without it lets a compromised gateway make nodes run anything, so
// bc-server says so at every start (a warning), on /readyz (a line after
// "ready") and in bc_command_signing_enabled, never only in the docs.
type signingState struct {
	on     bool
	detail string
}

// signingState reads the state: a process with the api component signs
// when it holds pki.commandSigning; a gateway-only process holds no key
// and reports whether the api processes do, from the trust bundle they
// publish.
func (s *Server) signingState(ctx context.Context) signingState {
	if a := s.signer.Load(); a != nil {
		return signingState{on: true, detail: "command signing: on (root " + shortID(trust.Ed25519KeyID(a.RootPublic())) + ")"}
	}
	tb, err := s.trust.Current(ctx)
	if s.cfg.Runs(ComponentAPI) {
		d := "command signing: off: pki.commandSigning is not set, so the commands and node specs this process queues go unsigned and a compromised gateway can make nodes run anything (docs/trust.md: turn signing on)"
		if tb != nil {
			d += fmt.Sprintf("; trust bundle version %d is published, and the nodes that hold it refuse every unsigned command", tb.GetVersion())
		}
		return signingState{detail: d}
	}
	switch {
	case err != nil:
		return signingState{detail: fmt.Sprintf("command signing: unknown: reading the published trust bundle: %v", err)}
	case tb != nil:
		return signingState{on: true, detail: fmt.Sprintf("command signing: on (the api processes sign; trust bundle version %d; this gateway holds no key)", tb.GetVersion())}
	}
	return signingState{detail: "command signing: off: no trust bundle is published, so the api processes run without pki.commandSigning and commands go unsigned (docs/trust.md: turn signing on)"}
}

// warnUnsigned logs the start-up warning when signing is off.
func (s *Server) warnUnsigned(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if st := s.signingState(ctx); !st.on {
		s.logger.Warn("command signing is off: commands and node specs go unsigned", "detail", st.detail)
	}
}

// registerSigningMetric exposes bc_command_signing_enabled.
func (s *Server) registerSigningMetric() {
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bc_command_signing_enabled",
		Help: "1 when commands and node specs are signed (this process holds pki.commandSigning, or, in a gateway-only process, a trust bundle is published), 0 when they go unsigned.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if s.signingState(ctx).on {
			return 1
		}
		return 0
	}))
}

// writeSigningDetail adds the signing line to /readyz's answer.
func (s *Server) writeSigningDetail(ctx context.Context, w http.ResponseWriter) {
	_, _ = w.Write([]byte(s.signingState(ctx).detail + "\n"))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
