package pluginhost

import (
	"errors"

	"golang.org/x/sys/unix"
)

// watchExit closes exited when process pid exits. It waits on a pidfd with
// WNOWAIT, so go-plugin still reaps the process itself. go-plugin's own done
// signal (the fallback, on kernels without pidfds) waits for the plugin's
// stdout and stderr pipes to close too, which a child still holding them can
// delay forever; the pidfd sees the plugin itself exit.
func watchExit(pid int, fallback <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		<-fallback
		return
	}
	defer unix.Close(fd)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// Exited, or already reaped (ECHILD): either way it is gone.
		return
	}
}
