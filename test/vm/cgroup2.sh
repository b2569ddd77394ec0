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

kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
[ -n "$kernel_pkg" ] || { echo "cgroup2.sh: cannot find the kernel package (run apt-get update)" >&2; exit 2; }
(cd "$work" && apt-get download -qq "$kernel_pkg" 2>/dev/null)
dpkg-deb -x "$work"/*.deb "$work/kernel"
vmlinuz=$(ls "$work"/kernel/boot/vmlinuz-* | head -1)

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

timeout 600 qemu-system-x86_64 -m 1024 -smp 2 -nographic -no-reboot \
  -kernel "$vmlinuz" -initrd "$work/initramfs.gz" \
  -append "console=ttyS0 quiet psi=1 panic=-1" | tee "$work/console.log" | grep -v -E '^\s*$' | sed -n '/^VM:/,$p'
grep -q 'VMTEST-EXIT=0' "$work/console.log"
