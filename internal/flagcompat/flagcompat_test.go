package flagcompat

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("config", "", "")
	fs.String("grpc-listen", "", "")
	fs.Bool("log-json", false, "")
	fs.BoolP("version", "v", false, "")
	return fs
}

// A long flag with one dash becomes its two-dash form, with or without
// =value, and its value is left as given; each rewrite is reported.
func TestSingleDashRewritesLongFlags(t *testing.T) {
	args, rw := SingleDash(flags(), []string{"-config", "x.yaml", "-log-json", "-grpc-listen=:1"})
	require.Equal(t, []string{"--config", "x.yaml", "--log-json", "--grpc-listen=:1"}, args)
	require.Len(t, rw, 3)
	require.Equal(t, "flag -config is deprecated and is accepted for one more release: use --config", rw[0].Warning())
	require.Equal(t, "flag -grpc-listen is deprecated and is accepted for one more release: use --grpc-listen", rw[2].Warning())
}

// A flag's value that looks like a single-dash flag is a value; so is
// everything after "--"; a one-letter flag and an unknown name are left
// for pflag (which reads or refuses them as it always did).
func TestSingleDashLeavesValuesShorthandsAndUnknownFlags(t *testing.T) {
	args, rw := SingleDash(flags(), []string{"--config", "-config", "-config", "-grpc-listen", "-v", "-nope", "--", "-config"})
	require.Equal(t, []string{"--config", "-config", "--config", "-grpc-listen", "-v", "-nope", "--", "-config"}, args)
	require.Len(t, rw, 1)

	fs := flags()
	args, _ = SingleDash(fs, []string{"-config", "/etc/x.yaml", "-log-json"})
	require.NoError(t, fs.Parse(args))
	v, _ := fs.GetString("config")
	require.Equal(t, "/etc/x.yaml", v)
	b, _ := fs.GetBool("log-json")
	require.True(t, b)
}
