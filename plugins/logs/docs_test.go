package logs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The operator guide's "The bundle's layout" unpacks a bundle with one line:
// run as written (its <key> the test's) on a bundle this plugin builds, it
// leaves the files the guide's table names in bundle/.
func TestOperatorGuideUnpacksABundleAsWritten(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator-guide.md"))
	require.NoError(t, err)
	page := string(b)
	i := strings.Index(page, "### The bundle's layout")
	require.GreaterOrEqual(t, i, 0)
	m := regexp.MustCompile("(?s)```sh\n(.*?)\n```").FindStringSubmatch(page[i:])
	require.NotNil(t, m, "the layout section shows the unpacking line")
	line := m[1]

	dir := t.TempDir()
	log, content := filepath.Join(dir, "unit.log"), []byte("2026-04-12T10:00:00+0000 node unit[1]: hello\n")
	require.NoError(t, os.WriteFile(log, content, 0o600))
	c := &collector{cfg: Config{}.withDefaults(), dir: dir, since: time.Now().Add(-DefaultWindow)}
	parts := []*part{{Name: "journal/unit.log", path: log, Size: int64(len(content)), Logs: true}}
	_, err = c.build(filepath.Join(dir, "abc.bundle"), parts, 1<<20, DefaultWindow)
	require.NoError(t, err)

	cmd := exec.Command("sh", "-ec", strings.ReplaceAll(line, "<key>", "abc"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", line, out)
	for _, f := range []string{"MANIFEST.json", "README.txt", "journal/unit.log"} {
		require.FileExists(t, filepath.Join(dir, "bundle", filepath.FromSlash(f)))
	}
}
