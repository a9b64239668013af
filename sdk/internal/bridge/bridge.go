// Package bridge hands sdk/kind's unexported converters and Host adapters to
// sdk/wire/kindpb, their public home for bcd and harnesses. kindpb imports
// kind (the converters take and return kind's types), so kind cannot import
// kindpb; and kind's own server calls the converters, so their code cannot
// move to kindpb either. kind sets these in its init; kindpb asserts each
// one's type, which its tests check. Nothing else reads them.
package bridge

// Each holds one of kind's functions, with the type named beside it.
var (
	ManifestToProto   any // func(kind.Manifest) *pluginv1.Manifest
	ManifestFromProto any // func(*pluginv1.Manifest) kind.Manifest
	ResultToProto     any // func(kind.Result) *pluginv1.Result
	ResultFromProto   any // func(*pluginv1.Result) kind.Result
	NewHostServer     any // func(kind.Host) pluginv1.HostServer
	NewHostClient     any // func(pluginv1.HostClient) kind.Host
)
