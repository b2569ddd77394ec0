#!/usr/bin/env bash
# The podvisor .deb under systemd: boots the systemd VM's Debian (see
# test/vm/systemd.sh; debootstrapped once and cached) with two builds of
# the package, and packages-systemd-check.sh installs 0.0.1 (the service
# is enabled and started, a process pod runs), upgrades to 0.0.2 (systemd
# restarts the daemon; the pod keeps its PID, KillMode=process) and purges
# (the pod is drained, the data dir removed).
#
#   test/vm/packages-systemd.sh      (from the repository's root; needs
#                                     qemu-system-x86, debootstrap, cpio)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/lib.sh"
work=$(mktemp -d /tmp/podvisor-pkgvm.XXXXXX)
trap 'rm -rf "$work" "$repo/dist/v0.0.1" "$repo/dist/v0.0.2"' EXIT

vmlinuz=$(fetch_kernel "$work/k")
root="$work/root"
systemd_root "$work" "$root"

cd "$repo"
build_debs "$root/root"
# The device's own config, there before the package: the systemd cgroup
# driver, as the packaged unit delegates its cgroup.
device_settings "$root" 'cgroups: {driver: systemd}'
mkdir -p "$root/etc/systemd/system/podvisor.service.d"
printf '[Service]\nStandardError=journal+console\n' > "$root/etc/systemd/system/podvisor.service.d/console.conf"
vm_check "$root" "$here/packages-systemd-check.sh" "podvisor package checks" multi-user.target

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"
rm -rf "$root"
echo "packages-systemd.sh: booting (software emulation)"
boot_vm "$vmlinuz" "$work/initramfs.gz" "$work/console.log"
log=$(tr -d '\r' < "$work/console.log")
grep -E 'VM:|VMTEST' <<<"$log" | sed 's/^\[ *[0-9.]*\] //' || true
grep -q 'VMTEST-EXIT=0' <<<"$log" || { echo "FAIL: the package checks inside the VM failed"; exit 1; }
echo "ok: the .deb installs, upgrades (pod PID kept) and purges under systemd"
