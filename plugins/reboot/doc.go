// Package reboot is the node.reboot kind: it asks logind (or, without logind,
// systemd) over the system D-Bus to reboot the node, and sees every error.
// It is the only code path in the repository that asks for a reboot: bcd
// never reboots on its own (see TestNoOtherRebootPath).
package reboot
