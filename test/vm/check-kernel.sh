#!/usr/bin/env bash
# Checks Debian's current amd64 kernel config (the kernel the VM tests boot)
# with `podvisor check-kernel`: it must offer everything podvisor needs,
# containerd pods included. Then checks that a minimal gateway config is
# refused, naming what it lacks.
#
#   test/vm/check-kernel.sh PODVISOR-BINARY
set -euo pipefail
podvisor=$1
work=$(mktemp -d /tmp/podvisor-kconfig.XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/lib.sh"
fetch_kernel "$work/k" >/dev/null
config=$(ls "$work"/k/kernel/boot/config-* | head -1)
"$podvisor" check-kernel --containerd --config "$config"
if out=$("$podvisor" check-kernel --config kernel/testdata/minimal.config 2>&1); then
  echo "check-kernel passed a kernel without CONFIG_CGROUP_SCHED:"; echo "$out"; exit 1
fi
grep -q 'MISSING  CONFIG_CGROUP_SCHED' <<<"$out" || { echo "minimal config: CONFIG_CGROUP_SCHED not named:"; echo "$out"; exit 1; }
echo "check-kernel: Debian's $(basename "$config") passes; the minimal config fails as it should"
