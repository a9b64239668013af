package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun_NewWritesTheModuleOnceAndNamesWhatItWrote(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "acme")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"new", "-no-tidy", "-kind", "acme.flash", dir}, &out, &errb), errb.String())
	require.Contains(t, out.String(), "bc-kind new: acme.flash (module example.com/acme)")
	require.Contains(t, out.String(), "  cmd/bc-kind-acme/main.go\n")
	require.FileExists(t, filepath.Join(dir, "flash.go"))

	out.Reset()
	errb.Reset()
	require.Equal(t, 1, run([]string{"new", "-no-tidy", dir}, &out, &errb))
	require.Contains(t, errb.String(), "directory is not empty")
}

func TestRun_UsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{nil, {"old"}, {"new"}, {"new", "-bogus", "x"}, {"new", "-kind", "Bad", filepath.Join(t.TempDir(), "x")}} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errb), "%q", args)
		require.NotEmpty(t, errb.String())
	}
	_, err := os.Stat("x")
	require.ErrorIs(t, err, os.ErrNotExist)
}
