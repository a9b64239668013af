package upgrade

import "context"

// StageRelease unpacks the release package at pkg (size bytes, as its
// payload says) into dir and runs the staged bcd's self-check with the
// staged plugins and their pins (plugin-sha256.json), the same two steps
// daemon.upgrade takes before it journals or activates anything. It returns
// the self-check's output. scripts/build-release's test calls it, so that a
// package the release build makes is one a node accepts.
func StageRelease(ctx context.Context, cfg Config, pkg, dir string, size int64) (string, error) {
	if err := unpack(pkg, dir, size); err != nil {
		return "", err
	}
	return selfCheck(ctx, cfg, dir)
}
