#!/usr/bin/env bash
# podvisor on arm64: boots Debian's arm64 kernel in qemu-system-aarch64
# (-machine virt -cpu cortex-a57, software emulation) with a busybox
# initramfs whose only cgroup hierarchy is cgroup2 with every controller
# and PSI on, and runs podvisor's process runtime there
# (test/vm/arm64-check.sh): a pod with a memory limit, a crash loop with
# backoff, adoption after a kill -9 of the daemon, eviction under memory
# pressure. Prints the boot time and the check's timings.
#
#   test/vm/arm64.sh BIN_DIR
#
# BIN_DIR holds podvisor, podvisor-shim and test/hog, built with
# GOARCH=arm64 CGO_ENABLED=0. Needs qemu-system-arm, cpio, apt-get and
# dpkg-deb: Debian's arm64 kernel and busybox-static packages are
# downloaded with apt-get against arm64 package lists kept in a temp dir
# (no foreign dpkg architecture is added; nothing is kept afterwards).
# PODVISOR_VM_ARCH=amd64 with amd64 binaries runs the same check in an x86
# VM (qemu-system-x86_64, also without KVM), to compare the timings.
set -euo pipefail
start=$(date +%s.%N)
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
arch=${PODVISOR_VM_ARCH:-arm64}
case $arch in
  arm64) qemu=(qemu-system-aarch64 -machine virt -cpu cortex-a57) console=ttyAMA0 ;;
  amd64) qemu=(qemu-system-x86_64) console=ttyS0 ;;
  *) echo "arm64.sh: PODVISOR_VM_ARCH is arm64 or amd64, not $arch" >&2; exit 2 ;;
esac
work=$(mktemp -d /tmp/podvisor-vm-$arch.XXXXXX)
trap 'rm -rf "$work"' EXIT

# apt with its own lists, cache and (empty) status in $work, for $arch only:
# the host's apt state and dpkg architectures stay as they are.
apt_arch() {
  local tool=$1; shift
  "$tool" -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache" \
    -o Dir::State::status="$work/apt/status" -o APT::Architecture="$arch" \
    -o APT::Architectures="$arch" -o APT::Sandbox::User=root -o Acquire::Languages=none "$@"
}
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/deb"
touch "$work/apt/status"
apt_arch apt-get update -qq >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; echo "arm64.sh: apt-get update for $arch failed" >&2; exit 2; }
kernel=$(apt_arch apt-cache depends "linux-image-$arch" 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
[ -n "$kernel" ] || { echo "arm64.sh: no linux-image-$arch in the $arch package lists" >&2; exit 2; }
(cd "$work/deb" && apt_arch apt-get download -qq "$kernel" "busybox-static:$arch" >"$work/apt.log" 2>&1) ||
  { cat "$work/apt.log"; echo "arm64.sh: cannot download $kernel and busybox-static:$arch" >&2; exit 2; }
dpkg-deb -x "$work"/deb/linux-image-*.deb "$work/kernel"
dpkg-deb -x "$work"/deb/busybox-static_*.deb "$work/busybox"
vmlinuz=$(ls "$work"/kernel/boot/vmlinuz-* | head -1)

root="$work/initramfs"
mkdir -p "$root"/{bin,proc,sys,tmp,dev,run}
cp "$work/busybox/bin/busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
for b in podvisor podvisor-shim hog; do install -m 755 "$bin/$b" "$root/bin/"; done
cp "$here/arm64-check.sh" "$root/check.sh"
cat > "$root/init" <<'INIT'
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
hostname podvisor-vm
psi=off; [ -r /proc/pressure/memory ] && psi=on
echo "VM: booted in $(cut -d' ' -f1 /proc/uptime) s: kernel $(uname -r) on $(uname -m), $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) MiB, PSI $psi, cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
sh /check.sh
echo "VMTEST-EXIT=$?"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"

booting=$(date +%s.%N)
timeout 600 "${qemu[@]}" -m 512 -smp 2 -nographic -no-reboot -kernel "$vmlinuz" -initrd "$work/initramfs.gz" \
  -append "console=$console quiet psi=1 panic=-1" > "$work/console.log" 2>&1 || true
end=$(date +%s.%N)
# The firmware's escape codes may precede the first line on x86.
grep -a -v -E '^\s*$' "$work/console.log" | sed -n 's/^.*\(VM: booted\)/\1/; /^VM:/,$p' | grep -v 'level=' | head -100
awk -v s="$start" -v b="$booting" -v e="$end" -v a="$arch" \
  'BEGIN { printf "arm64.sh: %s: %.0f s in all: %.0f s to fetch and pack, %.0f s in the VM\n", a, e - s, b - s, e - b }'
grep -a -q 'VMTEST-EXIT=' "$work/console.log" || { echo "arm64.sh: the check did not finish; the console's end:"; tail -30 "$work/console.log"; }
grep -a -q 'VMTEST-EXIT=0' "$work/console.log"
