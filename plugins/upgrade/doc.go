// Package upgrade is the daemon.upgrade kind. On the node it verifies the
// release statement against a release key of the node's own trust bundle
// (whatever the gateway says), refuses a downgrade that the release is not
// signed for and a target that rolled back here before, checks free disk,
// downloads the package with a size cap and its SHA-256 checked while
// streaming, stages it beside the running version, runs the staged bcd's
// self-check, journals {command, from, to, deadline} with fsync and hands
// off to bcd-upgrader, started as a transient systemd unit over D-Bus so
// that restarting bcd (whose cgroup holds this plugin) cannot kill it.
package upgrade
