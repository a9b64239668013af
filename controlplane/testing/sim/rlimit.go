package sim

import (
	"fmt"
	"syscall"
)

// RaiseFileLimit raises the soft limit on open files to the hard limit: a
// fleet of N sessions holds N sockets on each side, and a gateway in the
// same process as its fleet twice that. It returns the new soft limit.
func RaiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("reading the open-file limit: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, fmt.Errorf("raising the open-file limit to %d: %w", l.Max, err)
		}
	}
	return l.Cur, nil
}
