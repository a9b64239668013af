// Package testplugins holds the SDK's test-only plugin mains under cmd/:
// kinds that sleep, spawn children, panic, call back into bcd, write to
// stdout after the handshake or serve an invalid manifest. The SDK's own
// tests (the conformance harness's) and bcd's plugin host tests build them
// and run them as real subprocesses. They live in the SDK module so that its
// tests need nothing outside it.
package testplugins

// The packages that tests build, relative to the SDK module's root (the
// repository's tests name them under ./sdk/).
const (
	// KindTest serves test.sleep, test.child, test.panic, test.host, test.env and test.noop.
	KindTest = "./internal/testplugins/cmd/bc-kind-test"
	// BadManifest serves a manifest that fails validation, bypassing the SDK.
	BadManifest = "./internal/testplugins/cmd/bc-kind-badmanifest"
	// Stdout serves test.stdout, which writes to stdout after the handshake.
	Stdout = "./internal/testplugins/cmd/bc-kind-stdout"
)
