// Package packaging holds the .deb and .rpm recipes (nfpm), systemd units,
// default configuration, maintainer scripts and seed trust bundle for bcd
// and bc-server. It has no code: its tests keep the shipped files valid for
// the loaders and loyal to the packaging rules (units are never conffiles,
// configs are config|noreplace, bcd's unit is Type=notify with a watchdog).
// scripts/build-packages builds the packages; scripts/check-packages checks
// the built ones with lintian, rpm, systemd-analyze and dpkg.
package packaging
