package gpureset

import (
	"context"
	"fmt"

	"github.com/better-compute/commands/plugins/internal/gpu/sysview"
	"github.com/better-compute/commands/plugins/internal/gpu/xid"
)

// StoreXIDs clears XID conditions in the XID store that inventory.refresh
// keeps (plugins/internal/gpu/xid), for the current boot.
//
// The store is a file shared with the nvml plugin, and across processes the
// last save wins: an inventory.refresh that saves at the same moment can
// bring a cleared condition back until the next refresh reads it again.
// bcd runs gpu.reset in the provision lane and inventory.refresh in its own,
// so the two can overlap; the window is one save.
type StoreXIDs struct {
	// Path is the store file.
	Path string
	// SysRoot is where proc/sys/kernel/random/boot_id is read ("/").
	SysRoot string
}

// ClearGPU forgets the XID conditions of the GPU at busID and saves.
func (s StoreXIDs) ClearGPU(_ context.Context, uuid, busID string) error {
	boot, err := sysview.View{Root: s.SysRoot}.BootID()
	if err != nil {
		return fmt.Errorf("clearing XIDs of %s: %w", uuid, err)
	}
	st, err := xid.OpenStore(s.Path, boot)
	if err != nil {
		return fmt.Errorf("clearing XIDs of %s: %w", uuid, err)
	}
	st.Clear(busID)
	if err := st.Save(); err != nil {
		return fmt.Errorf("clearing XIDs of %s: %w", uuid, err)
	}
	return nil
}
