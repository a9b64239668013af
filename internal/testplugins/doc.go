// Package testplugins holds test-only plugin mains under cmd/: kinds that
// sleep, spawn children, panic, call back into bcd, write to stdout after the
// handshake or serve an invalid manifest, and a bare gRPC server that is the
// floor for cold-start benchmarks. Tests build them with
// internal/testutil.BuildBinary and run them as real subprocesses.
package testplugins

// The packages that tests build.
const (
	// KindTest serves test.sleep, test.child, test.panic, test.host, test.env
	// and test.noop; it lives in the SDK module (sdk/internal/testplugins),
	// whose own tests run it too.
	KindTest = "./sdk/internal/testplugins/cmd/bc-kind-test"
	// BadManifest serves a manifest that fails validation, bypassing the SDK.
	BadManifest = "./sdk/internal/testplugins/cmd/bc-kind-badmanifest"
	// Stdout serves test.stdout, which writes to stdout after the handshake.
	Stdout = "./sdk/internal/testplugins/cmd/bc-kind-stdout"
	// BCDCore serves bcd's core test kinds (bcdcore.hold, .holdonce, .bulk,
	// .reboot, .attested, .destroy and the e2e kinds): they record each run's command
	// id in a file and hold until released.
	BCDCore = "./internal/testplugins/bcdcore_plugin"
	// Legacy serves legacy.echo over protocol version 1 only, with the
	// handshake plugins had before versions were negotiated.
	Legacy = "./internal/testplugins/cmd/bc-kind-legacy"
	// Versioned serves versioned.hold at the version given at build time
	// (testutil.BuildVersion), for upgrades across a reload.
	Versioned = "./internal/testplugins/cmd/bc-kind-versioned"
	// GRPCFloor is a bare gRPC server on a unix socket: the cold-start floor.
	GRPCFloor = "./internal/testplugins/cmd/grpc-floor"
)
