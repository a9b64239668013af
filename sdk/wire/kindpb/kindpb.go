// Package kindpb converts between sdk/kind's types and the bc.plugin.v1
// messages and services: what a host (bcd) and a harness (sdk/kindtest)
// need to read a plugin's manifests and results and to serve the Host
// service. Plugin authors never import it: kind.Serve converts for them.
// Until SDK 0.3.0 these were kind's own exported functions; kind keeps
// deprecated forwarders for one release.
package kindpb

import (
	"github.com/better-compute/commands/sdk/internal/bridge"
	"github.com/better-compute/commands/sdk/kind"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// ManifestToProto converts a manifest for the wire.
func ManifestToProto(m kind.Manifest) *pluginv1.Manifest {
	return bridge.ManifestToProto.(func(kind.Manifest) *pluginv1.Manifest)(m)
}

// ManifestFromProto converts a manifest from the wire. The result is not
// validated: a host calls Manifest.Validate before it trusts it.
func ManifestFromProto(p *pluginv1.Manifest) kind.Manifest {
	return bridge.ManifestFromProto.(func(*pluginv1.Manifest) kind.Manifest)(p)
}

// ResultToProto converts a result for the wire.
func ResultToProto(r kind.Result) *pluginv1.Result {
	return bridge.ResultToProto.(func(kind.Result) *pluginv1.Result)(r)
}

// ResultFromProto converts a result from the wire. A status the SDK does not
// know reads as kind.StatusFailed.
func ResultFromProto(p *pluginv1.Result) kind.Result {
	return bridge.ResultFromProto.(func(*pluginv1.Result) kind.Result)(p)
}

// NewHostServer serves a Host as the bc.plugin.v1 Host service: bcd serves
// its own state this way over go-plugin's broker, and harnesses serve test
// data. A nil h answers every call with FailedPrecondition, which the plugin
// sees as kind.ErrNoHost: no bcd behind it.
func NewHostServer(h kind.Host) pluginv1.HostServer {
	return bridge.NewHostServer.(func(kind.Host) pluginv1.HostServer)(h)
}

// NewHostClient wraps a HostClient as a kind.Host, the way a plugin's
// handler sees bcd: for harnesses that call a Host service directly.
func NewHostClient(c pluginv1.HostClient) kind.Host {
	return bridge.NewHostClient.(func(pluginv1.HostClient) kind.Host)(c)
}
