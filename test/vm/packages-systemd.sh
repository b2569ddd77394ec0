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
for v in 0.0.1 0.0.2; do
  packaging/release.sh "v$v" amd64 >/dev/null
  packaging/packages.sh "v$v" amd64 >/dev/null
  cp "dist/v$v/packages/linux-amd64/podvisor_${v}_amd64.deb" "$root/root/"
done
# The device's own config, there before the package: the systemd cgroup
# driver, as the packaged unit delegates its cgroup.
mkdir -p "$root/etc/podvisor/manifests" "$root/etc/systemd/system/podvisor.service.d"
printf 'cgroups: {driver: systemd}\n' > "$root/etc/podvisor/config.yaml"
printf '[Service]\nStandardError=journal+console\n' > "$root/etc/systemd/system/podvisor.service.d/console.conf"
cat > "$root/etc/podvisor/manifests/sleeper.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  runtimeClassName: process
  containers:
  - name: app
    image: host
    command: ["sleep", "100000"]
YAML
install -m 755 "$here/packages-systemd-check.sh" "$root/usr/local/bin/vm-check"
cat > "$root/etc/systemd/system/vm-check.service" <<'EOF2'
[Unit]
Description=podvisor package checks
After=multi-user.target
[Service]
Type=oneshot
StandardOutput=journal+console
StandardError=journal+console
ExecStart=/usr/local/bin/vm-check
[Install]
WantedBy=default.target
EOF2
ln -sf /etc/systemd/system/vm-check.service "$root/etc/systemd/system/multi-user.target.wants/"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"
rm -rf "$root"
echo "packages-systemd.sh: booting (software emulation)"
boot_vm "$vmlinuz" "$work/initramfs.gz" "$work/console.log"
log=$(tr -d '\r' < "$work/console.log")
grep -E 'VM:|VMTEST' <<<"$log" | sed 's/^\[ *[0-9.]*\] //' || true
grep -q 'VMTEST-EXIT=0' <<<"$log" || { echo "FAIL: the package checks inside the VM failed"; exit 1; }
echo "ok: the .deb installs, upgrades (pod PID kept) and purges under systemd"
