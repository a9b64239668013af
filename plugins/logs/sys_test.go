package logs_test

import "syscall"

var syscallZero = syscall.Signal(0)
