package journal

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// FuzzOpen feeds arbitrary bytes as the journal file: whatever is on disk,
// Open must come back with a working journal ("a missing or corrupt journal
// means a new journal id, never a crash loop").
func FuzzOpen(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("not a journal"))
	dir := f.TempDir()
	j, err := Open(hclog.NewNullLogger(), dir, Options{})
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := j.Insert(Record{ID: "cmd_seed", State: StateAccepted, NotAfter: time.Now()}); err != nil {
		f.Fatal(err)
	}
	_ = j.Close()
	valid, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid[:4096])
	f.Add(valid[:8192])
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := Open(hclog.NewNullLogger(), dir, Options{})
		if err != nil {
			t.Fatalf("Open failed on a damaged file: %v", err)
		}
		defer j.Close()
		if j.ID() == "" {
			t.Fatal("no journal id")
		}
		if _, _, err := j.Insert(Record{ID: "cmd_after", State: StateAccepted, NotAfter: time.Now()}); err != nil {
			t.Fatalf("the journal does not take writes: %v", err)
		}
		if _, err := j.Recent(10); err != nil {
			t.Fatalf("the journal does not read back: %v", err)
		}
	})
}
