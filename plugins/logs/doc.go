// Package logs is the logs.collect kind: it gathers a support bundle on the
// node (journald logs for a window, bcd's and its plugins' own among them,
// the kernel log, the GPU inventory and conditions, bcd's recent journal
// records) into one tar.gz, truncates it oldest first to fit the cap, and
// PUTs it to the presigned URL the control plane put into the command.
package logs
