// Package fsutil holds the file-system steps that durable writes on a node
// share: bcd's journal, the batch ledger and the upgrade layout make a new directory
// entry survive a power cut.
package fsutil

import "os"

// SyncDir fsyncs the directory dir, so that entries created, renamed or
// removed in it are on disk.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
