# shellcheck shell=bash
# go-env.sh is sourced by the scripts that run the Go toolchain. go-nvml's
# cgo wrappers call NVML functions that its own nvml.h marks deprecated, and
# gcc warns about each one: about 145 lines on a cold build, though nothing
# is wrong. Only that warning is turned off; errors and every other warning
# still print. The Makefile exports the same CGO_CFLAGS (make
# cgo-warnings-check proves it), so a script run from make adds nothing.
case " ${CGO_CFLAGS:-} " in
  *" -Wno-deprecated-declarations "*) ;;
  *) export CGO_CFLAGS="${CGO_CFLAGS:--g -O2} -Wno-deprecated-declarations" ;;
esac
