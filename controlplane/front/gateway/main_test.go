package gateway_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests: every
// session, listener, timer and wake-up the gateway starts must end with
// the context or the stream that owns it (issue 32).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the gateway's tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
