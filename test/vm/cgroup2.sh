#!/usr/bin/env bash
# Runs static Go test binaries inside a small VM whose only cgroup
# hierarchy is cgroup v2 with every controller, to exercise podvisor's v2
# paths on hosts that have only v1 controllers (like this project's CI).
#
#   test/vm/cgroup2.sh BINARY [BINARY...]
#
# Needs Debian's qemu-system-x86, busybox-static and cpio, and a kernel
# package (linux-image-*-amd64), which it fetches with apt-get download.
# Boots with software emulation (no KVM) in about 10-30 s.
set -euo pipefail
work=$(mktemp -d /tmp/podvisor-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$(dirname "$0")/lib.sh"
vmlinuz=$(fetch_kernel "$work/k")

root="$work/initramfs"
mkdir -p "$root"/{bin,proc,sys,tmp,dev,tests}
cp "$(command -v busybox)" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
for b in "$@"; do cp "$b" "$root/tests/"; done
cat > "$root/init" <<'INIT'
#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "VM: kernel $(cat /proc/sys/kernel/osrelease), cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
status=0
for t in /tests/*; do
  echo "VM: running $t"
  PATH=/bin CI=true "$t" -test.v || status=1
done
echo "VMTEST-EXIT=$status"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"

boot_vm "$vmlinuz" "$work/initramfs.gz" "$work/console.log"
grep -v -E '^\s*$' "$work/console.log" | sed -n '/^VM:/,$p'
grep -q 'VMTEST-EXIT=0' "$work/console.log"
