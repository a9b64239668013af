// Package upgrade is what the three parties of a daemon.upgrade share on a
// node: the install layout (versions side by side, the "current" symlink
// that systemd's ExecStart names), the upgrade state file that journals
// {command, from, to, deadline} and each step with fsync, the rejoin marker
// the new daemon writes into it once Welcome arrives, and the list of
// skipped targets. The daemon.upgrade plugin prepares and hands off, the
// bcd-upgrader helper swaps, restarts and rolls back, and bcd settles the
// command from the state file after the restart. Every change of the state
// file is made under a file lock, so the new daemon's rejoin marker and the
// helper's rollback decision can never both win.
package upgrade

// KindName is the daemon.upgrade kind's name; plugins/upgrade/manifest
// serves the same string (a test checks they agree).
const KindName = "daemon.upgrade"
