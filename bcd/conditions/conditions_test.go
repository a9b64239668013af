package conditions_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/better-compute/commands/bcd/conditions"
	"github.com/better-compute/commands/sdk/kind"
	"github.com/better-compute/commands/sdk/nodespec"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func setup(t *testing.T) (*conditions.Detector, string, *clock) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "reboot-required")
	c := &clock{t: time.Date(2026, 4, 12, 10, 0, 0, 0, time.UTC)}
	return conditions.New(conditions.Config{RebootRequiredFile: file, Now: c.now}), file, c
}

func rebootRequired(t *testing.T, conds []kind.Condition) kind.Condition {
	t.Helper()
	for _, c := range conds {
		if c.Type == conditions.TypeRebootRequired {
			return c
		}
	}
	t.Fatalf("no RebootRequired condition in %v", conds)
	return kind.Condition{}
}

// Listed even when false, so the control plane clears a stale one.
func TestNoRebootRequired(t *testing.T) {
	d, _, _ := setup(t)
	c := rebootRequired(t, d.Current(context.Background(), nodespec.Spec{}))
	require.False(t, c.Status)
	require.Empty(t, c.Reason)
	require.True(t, c.Since.IsZero())
}

// "the Debian convention /var/run/reboot-required", with the packages of
// reboot-required.pkgs named in the message.
func TestRebootRequiredFileWithPackages(t *testing.T) {
	d, file, clk := setup(t)
	require.NoError(t, os.WriteFile(file, []byte("*** System restart required ***\n"), 0o644))
	require.NoError(t, os.WriteFile(file+".pkgs", []byte("linux-image-6.1.0-18-amd64\nnvidia-driver\nlinux-image-6.1.0-18-amd64\n"), 0o644))

	c := rebootRequired(t, d.Current(context.Background(), nodespec.Spec{}))
	require.True(t, c.Status)
	require.Equal(t, conditions.ReasonPackages, c.Reason)
	require.Contains(t, c.Message, "packages wait for a reboot: linux-image-6.1.0-18-amd64, nvidia-driver")
	require.Contains(t, c.Message, "bcd never reboots on its own")
	require.Equal(t, clk.t, c.Since)

	// Since stays where the condition began while it holds.
	first := c.Since
	clk.t = clk.t.Add(time.Hour)
	c = rebootRequired(t, d.Current(context.Background(), nodespec.Spec{}))
	require.Equal(t, first, c.Since)

	// After the reboot the file is gone and the condition clears.
	require.NoError(t, os.Remove(file))
	c = rebootRequired(t, d.Current(context.Background(), nodespec.Spec{}))
	require.False(t, c.Status)
}

func TestRebootRequiredFileWithoutPackages(t *testing.T) {
	d, file, _ := setup(t)
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	c := rebootRequired(t, d.Current(context.Background(), nodespec.Spec{}))
	require.True(t, c.Status)
	require.Contains(t, c.Message, file+" exists")
}

func TestManyPackagesAreCapped(t *testing.T) {
	d, file, _ := setup(t)
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "pkg%02d\n", i)
	}
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.NoError(t, os.WriteFile(file+".pkgs", []byte(b.String()), 0o644))
	c := rebootRequired(t, d.Current(context.Background(), nodespec.Spec{}))
	require.Contains(t, c.Message, "pkg19, and 10 more")
	require.NotContains(t, c.Message, "pkg20")
}

// "or a flag that desired state sets"
func TestRebootRequiredByDesiredState(t *testing.T) {
	d, file, _ := setup(t)
	c := rebootRequired(t, d.Current(context.Background(), nodespec.Spec{RebootRequired: true}))
	require.True(t, c.Status)
	require.Equal(t, conditions.ReasonDesiredState, c.Reason)
	require.Contains(t, c.Message, "desired state")

	require.NoError(t, os.WriteFile(file, nil, 0o644))
	c = rebootRequired(t, d.Current(context.Background(), nodespec.Spec{RebootRequired: true}))
	require.Equal(t, conditions.ReasonBoth, c.Reason)
}

func TestDefaultPath(t *testing.T) {
	require.Equal(t, "/var/run/reboot-required", conditions.DefaultRebootRequiredFile)
	d := conditions.New(conditions.Config{})
	require.NotNil(t, d.Current(context.Background(), nodespec.Spec{}))
}
