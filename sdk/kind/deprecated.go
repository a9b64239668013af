package kind

import (
	"github.com/better-compute/commands/sdk/internal/bridge"
	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

// Hand the wire-side functions to sdk/wire/kindpb (see sdk/internal/bridge).
func init() {
	bridge.ManifestToProto = manifestToProto
	bridge.ManifestFromProto = manifestFromProto
	bridge.ResultToProto = resultToProto
	bridge.ResultFromProto = resultFromProto
	bridge.NewHostServer = newHostServer
	bridge.NewHostClient = newHostClient
}

// The functions below were kind's in SDK 0.2.0. Only bcd and harnesses call
// them (a plugin's Serve converts for it), so SDK 0.3.0 moved them to
// github.com/better-compute/commands/sdk/wire/kindpb; these forwarders stay
// for one release, so that code built on 0.2.0 still compiles.

// ManifestToProto converts a manifest for the wire.
//
// Deprecated: use kindpb.ManifestToProto
// (github.com/better-compute/commands/sdk/wire/kindpb).
func ManifestToProto(m Manifest) *pluginv1.Manifest { return manifestToProto(m) }

// ManifestFromProto converts a manifest from the wire. The result is not
// validated: call Validate.
//
// Deprecated: use kindpb.ManifestFromProto
// (github.com/better-compute/commands/sdk/wire/kindpb).
func ManifestFromProto(p *pluginv1.Manifest) Manifest { return manifestFromProto(p) }

// ResultToProto converts a result for the wire.
//
// Deprecated: use kindpb.ResultToProto
// (github.com/better-compute/commands/sdk/wire/kindpb).
func ResultToProto(r Result) *pluginv1.Result { return resultToProto(r) }

// ResultFromProto converts a result from the wire.
//
// Deprecated: use kindpb.ResultFromProto
// (github.com/better-compute/commands/sdk/wire/kindpb).
func ResultFromProto(p *pluginv1.Result) Result { return resultFromProto(p) }

// NewHostServer serves a Host as the bc.plugin.v1 Host service.
//
// Deprecated: use kindpb.NewHostServer
// (github.com/better-compute/commands/sdk/wire/kindpb).
func NewHostServer(h Host) pluginv1.HostServer { return newHostServer(h) }

// NewHostClient wraps a HostClient as a Host.
//
// Deprecated: use kindpb.NewHostClient
// (github.com/better-compute/commands/sdk/wire/kindpb).
func NewHostClient(c pluginv1.HostClient) Host { return newHostClient(c) }
