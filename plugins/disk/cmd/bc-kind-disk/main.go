// Command bc-kind-disk is the disk.wipe and deploy plugin that bcd loads. It
// runs as root on the machine itself (a node or a discovery ramdisk) and
// needs wipefs, and for the drive erases nvme-cli and hdparm, on PATH.
package main

import (
	"github.com/better-compute/commands/plugins/disk"
	"github.com/better-compute/commands/plugins/disk/deploy"
	"github.com/better-compute/commands/plugins/disk/wipe"
	"github.com/better-compute/commands/sdk/kind"
)

func main() {
	kind.Serve(disk.Kinds(wipe.Deps{}, deploy.Deps{})...)
}
