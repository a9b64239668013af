package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseSince reads a point in time as the CLI's time flags take it: a
// duration back from now (90s, 30m, 1h, 7d) or an RFC 3339 time
// (2026-12-04T15:00:00Z). Days are whole days of 24 hours.
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, fmt.Errorf("empty: want a duration back from now (1h, 30m, 7d) or an RFC 3339 time (2026-12-04T15:00:00Z)")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := parseAgo(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want a duration back from now (1h, 30m, 7d) or an RFC 3339 time (2026-12-04T15:00:00Z)", s)
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%q: a duration back from now must be more than 0", s)
	}
	return now.Add(-d), nil
}

// maxAgo bounds a duration back from now (about 100 years), so that
// now - d stays a time PostgreSQL and protobuf hold.
const maxAgo = 100 * 365 * 24 * time.Hour

// parseAgo is a Go duration, or a whole number of days ("7d").
func parseAgo(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil {
			return 0, err
		}
		if n < 0 || n > int64(maxAgo/(24*time.Hour)) {
			return 0, fmt.Errorf("%d days is out of range", n)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d > maxAgo {
		return 0, fmt.Errorf("%s is out of range", d)
	}
	return d, nil
}
