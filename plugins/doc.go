// Package plugins holds the first-party kind plugins that ship with bcd, one
// directory and one binary each (nvml, gpureset, dcgm, logs, reboot), and
// the walls between them, which walls_test.go keeps:
//
//   - each plugin's manifest is one Go value in plugins/<plugin>/manifest, a
//     package that imports only sdk/kind; the plugin serves it and the
//     control plane's registry imports it, and nothing else of the plugin;
//   - no plugin imports another: what several GPU kinds share (running
//     nvidia-smi and reading its exit codes, the in-use check, the
//     inventory, the fake tools of the tests) lives once under
//     plugins/internal/gpu, which imports no plugin.
package plugins
