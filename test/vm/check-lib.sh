# Shared by the check scripts that run inside the VMs (sourced from beside
# them: the host scripts install it there). POSIX sh, for busybox too.

# ok WHAT: a check passed.
ok() { echo "VM: ok $*"; }

# until_ok SECONDS CMD...: retries CMD every 0.2 s, SECONDS long.
until_ok() {
  n=$(($1 * 5)); shift
  while [ "$n" -gt 0 ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2; n=$((n - 1))
  done
  return 1
}
