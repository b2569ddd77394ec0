#!/usr/bin/env bash
# containerd pods on cgroup v2: boots a VM whose only hierarchy is cgroup2
# (as in cgroup2.sh) with Debian's containerd, shim and runc, and runs
# podvisor with a containerd pod in it (test/vm/containerd-check.sh).
#
#   test/vm/containerd.sh BINDIR IMAGE-ARCHIVE
#
# BINDIR holds podvisor, podvisor-shim and podvisor-containerd (static);
# IMAGE-ARCHIVE is an OCI archive of podvisor.test/busybox:1.
# Needs qemu-system-x86, busybox-static, cpio, containerd and runc.
set -euo pipefail
bin=$1 image=$2
work=$(mktemp -d /tmp/podvisor-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$(dirname "$0")/lib.sh"
vmlinuz=$(fetch_kernel "$work/k")

root="$work/initramfs"
mkdir -p "$root"/{bin,proc,sys,tmp,dev,run,etc,usr/bin,usr/sbin}
cp "$(command -v busybox)" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
for b in podvisor podvisor-shim podvisor-containerd; do cp "$bin/$b" "$root/bin/"; done
# Debian's containerd, shim and runc, with the libraries they link.
for b in /usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/sbin/runc; do
  cp "$b" "$root$b"
  for lib in $(ldd "$b" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
done
cp "$image" "$root/image.tar"
cp "$(dirname "$0")/containerd-check.sh" "$root/check.sh"
cp "$(dirname "$0")/check-lib.sh" "$root/check-lib.sh"
# runc cannot pivot_root out of the initramfs: the first init copies the
# system into a tmpfs and switches its root there.
cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mkdir -p /newroot
/bin/busybox mount -t tmpfs -o size=800m root /newroot
for d in /*; do
  case $d in /proc|/sys|/dev|/newroot) ;; *) /bin/busybox cp -a "$d" /newroot/ ;; esac
done
/bin/busybox mkdir -p /newroot/proc /newroot/sys /newroot/dev
exec /bin/busybox switch_root /newroot /stage2
INIT
cat > "$root/stage2" <<'INIT'
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "VM: kernel $(cat /proc/sys/kernel/osrelease), cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
sh /check.sh
echo "VMTEST-EXIT=$?"
poweroff -f
INIT
chmod +x "$root/init" "$root/stage2"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"

boot_vm "$vmlinuz" "$work/initramfs.gz" "$work/console.log"
grep -v -E '^\s*$' "$work/console.log" | sed -n '/^VM:/,$p' | grep -v 'level=info' | head -80
grep -q 'VMTEST-EXIT=0' "$work/console.log"
