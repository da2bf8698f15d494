# Sourced (". scripts/cgoflags.sh", POSIX sh) by every script that builds or
# tests Go code. go-nvml's cgo header marks some NVML calls deprecated, and
# the C compiler prints hundreds of -Wdeprecated-declarations warnings on
# every fresh build of it: this appends -Wno-deprecated-declarations to the
# CGO_CFLAGS in force (the user's, from the environment or `go env -w`;
# else Go's default, -O2 -g) and exports it. Sourcing it twice adds nothing.
case " $(go env CGO_CFLAGS) " in
  *" -Wno-deprecated-declarations "*) ;;
  *) CGO_CFLAGS="$(go env CGO_CFLAGS) -Wno-deprecated-declarations"; export CGO_CFLAGS ;;
esac
