// Package protocompat holds the test that keeps the wire protocols
// compatible with the last release: `buf breaking` of the protos against
// buf.baseline.binpb (make proto-baseline writes it at a release, make
// proto-breaking runs the check in CI). It has no code of its own.
package protocompat
