//go:build linux

package kindtest_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/sdk/internal/sdktest"
	"github.com/better-compute/commands/sdk/internal/testplugins"
	"github.com/better-compute/commands/sdk/kindtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sdktest.CleanupBuilds()
	os.Exit(code)
}

// The example plugin passes the harness: the SDK guide's plugin is conformant.
func TestRun_ExamplePlugin(t *testing.T) {
	bin := sdktest.BuildBinary(t, "./example/cmd/bc-kind-example")
	kindtest.Run(t, bin, kindtest.Options{
		Kinds:       []string{"example.echo", "example.noop"},
		BadPayloads: map[string]json.RawMessage{"example.echo": json.RawMessage(`{"message":""}`)},
		LongRunning: &kindtest.Case{Kind: "example.echo", Payload: json.RawMessage(`{"message":"hi","sleepMs":60000}`)},
		InjectPanic: &kindtest.Case{Kind: "example.noop", Payload: json.RawMessage(`{}`)},
	})
}

// envUndeclared makes TestRun_UndeclaredChecks run Run on a plugin that
// declares neither its cancellation nor its panics; the parent test reads
// what the child printed.
const envUndeclared = "KINDTEST_TEST_UNDECLARED"

// A plugin that says neither how its cancellation and its panics are
// checked nor why they cannot be fails Run, and the failure names what to
// set; one that gives its reasons passes with the reasons logged. Run
// fails through t, so the failing case runs in a child test process.
func TestRun_UndeclaredChecks(t *testing.T) {
	bin := sdktest.BuildBinary(t, "./example/cmd/bc-kind-example")
	if os.Getenv(envUndeclared) != "" {
		kindtest.Run(t, bin, kindtest.Options{})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRun_UndeclaredChecks$", "-test.v")
	cmd.Env = append(os.Environ(), envUndeclared+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "Run passed a plugin that declares neither check:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestRun_UndeclaredChecks/cancellation_honoured")
	require.Contains(t, string(out), kindtest.ErrNoCancelCase.Error())
	require.Contains(t, string(out), "--- FAIL: TestRun_UndeclaredChecks/panic_becomes_a_failed_result")
	require.Contains(t, string(out), kindtest.ErrNoPanicCase.Error())
	require.NotContains(t, string(out), "--- SKIP")

	t.Run("with reasons", func(t *testing.T) {
		kindtest.Run(t, bin, kindtest.Options{
			BadPayloads:         map[string]json.RawMessage{"example.echo": json.RawMessage(`{"message":""}`)},
			CancelNotApplicable: "the test's reason",
			PanicNotApplicable:  "the test's reason",
		})
	})
}

// The injected panic needs the plugin started with Options.InjectPanic: a
// command sent to a plugin started without it runs its real handler.
func TestCheckInjectedPanic_NeedsTheOption(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, "./example/cmd/bc-kind-example"), kindtest.Options{})
	err := p.CheckInjectedPanic(kindtest.Case{Kind: "example.noop", Payload: json.RawMessage(`{}`)})
	require.ErrorContains(t, err, "started without Options.InjectPanic")
}

// An injected panic into a payload the schema refuses never reaches the
// handler: the check says the payload must be valid.
func TestCheckInjectedPanic_CatchesAnInvalidPayload(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, "./example/cmd/bc-kind-example"), kindtest.Options{
		InjectPanic: &kindtest.Case{Kind: "example.echo", Payload: json.RawMessage(`{"message":""}`)},
	})
	err := p.CheckInjectedPanic(kindtest.Case{Kind: "example.echo", Payload: json.RawMessage(`{"message":""}`)})
	require.ErrorContains(t, err, "must be a payload the kind's schema accepts")
}

func TestRun_TestPlugin_WithAPanickingKind(t *testing.T) {
	bin := sdktest.BuildBinary(t, testplugins.KindTest)
	kindtest.Run(t, bin, kindtest.Options{
		LongRunning: &kindtest.Case{Kind: "test.sleep", Payload: json.RawMessage(`{"steps":100000,"stepMs":20}`)},
		Panic:       &kindtest.Case{Kind: "test.panic", Payload: json.RawMessage(`{}`)},
		// test.panic and test.host accept any object; an array is still refused.
	})
}

func TestCheckStdout_CatchesAPluginThatWritesToStdout(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.Stdout), kindtest.Options{})
	require.NoError(t, p.CheckStdout(10*time.Millisecond), "nothing written yet")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.Execute(ctx, "test.stdout", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	sdktest.WaitFor(t, 10*time.Second, "the stray line to arrive", func() bool { return p.Stdout() != "" })
	err = p.CheckStdout(10 * time.Millisecond)
	require.ErrorContains(t, err, "wrote to stdout after the handshake")
	require.ErrorContains(t, err, "test.stdout writes to stdout")
}

func TestCheckManifests_CatchesAnInvalidManifest(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.BadManifest), kindtest.Options{})
	_, err := p.CheckManifests(nil)
	require.ErrorContains(t, err, "lane")
	require.ErrorContains(t, err, "timeout")
	require.ErrorContains(t, err, "roles")
}

func TestCheckManifests_CatchesAMissingKind(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	_, err := p.CheckManifests([]string{"test.sleep", "test.missing"})
	require.ErrorContains(t, err, "kind test.missing is not served")
}

func TestCheckCancel_CatchesAPluginThatIgnoresTheCancel(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{CancelWithin: 300 * time.Millisecond})
	err := p.CheckCancel(kindtest.Case{Kind: "test.sleep", Payload: json.RawMessage(`{"steps":1000,"stepMs":20,"ignoreCancel":true}`)}, 50*time.Millisecond, 300*time.Millisecond)
	require.ErrorContains(t, err, "no outcome within")
}

// A handler that reports progress and then ignores the cancel fails the
// check even when it ends within the bound and returns ctx.Err() (so the SDK
// calls it cancelled): it did all its work after the cancel. Before the
// check counted progress after the cancel, this passed.
func TestCheckCancel_CatchesAHandlerThatReportsProgressAndIgnoresTheCancel(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	err := p.CheckCancel(kindtest.Case{Kind: "test.sleep", Payload: json.RawMessage(`{"steps":15,"stepMs":20,"ignoreCancel":true,"returnCtxErr":true}`)}, 5*time.Second, 5*time.Second)
	require.ErrorContains(t, err, "progress steps after the cancel")
	require.ErrorContains(t, err, "step 15")
}

// A handler that returns at once on the cancel but leaves its work running
// (still reporting progress) fails the check: its result is not the end of
// its work.
func TestCheckCancel_CatchesWorkThatGoesOnAfterTheResult(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	err := p.CheckCancel(kindtest.Case{Kind: "test.sleep", Payload: json.RawMessage(`{"steps":1000,"stepMs":20,"detach":true}`)}, 5*time.Second, 5*time.Second)
	require.ErrorContains(t, err, "after its result")
}

// The check passes a handler that stops between actions, however often it
// reports progress.
func TestCheckCancel_PassesAHandlerThatStops(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	require.NoError(t, p.CheckCancel(kindtest.Case{Kind: "test.sleep", Payload: json.RawMessage(`{"steps":100000,"stepMs":1}`)}, 5*time.Second, 5*time.Second))
}

func TestCheckCancel_CatchesACommandThatIsNotLongRunning(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	err := p.CheckCancel(kindtest.Case{Kind: "test.noop", Payload: json.RawMessage(`{}`)}, 5*time.Second, time.Second)
	require.ErrorContains(t, err, "ended before it was cancelled")
}

func TestCheckBadPayload_CatchesAKindThatAcceptsIt(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	err := p.CheckBadPayload("test.noop", json.RawMessage(`{"anything":"goes"}`))
	require.ErrorContains(t, err, "want failed with reason invalid-payload")
}

func TestCheckPanic_CatchesAKindThatDoesNotPanic(t *testing.T) {
	p := kindtest.Start(t, sdktest.BuildBinary(t, testplugins.KindTest), kindtest.Options{})
	err := p.CheckPanic(kindtest.Case{Kind: "test.noop", Payload: json.RawMessage(`{}`)})
	require.ErrorContains(t, err, "want failed with reason panic")
}
