package logs

import "github.com/better-compute/commands/plugins/logs/manifest"

// Manifest is logs.collect's manifest, manifest.Manifest.
//
// Deprecated: import plugins/logs/manifest instead, which links none of this
// plugin's code. It is kept only for the tests of controlplane/api and
// controlplane/bundles, which validate payloads against it and belong to
// other changes; the plugin binary serves manifest.Manifest itself.
var Manifest = manifest.Manifest
