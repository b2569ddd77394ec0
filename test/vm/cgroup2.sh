#!/usr/bin/env bash
# Runs static Go test binaries inside a small VM whose only cgroup
# hierarchy is cgroup v2 with every controller, to exercise podvisor's v2
# paths on hosts that have only v1 controllers (like this project's CI).
#
#   test/vm/cgroup2.sh [-f FILE]... BINARY[=ARGS] [BINARY[=ARGS]...]
#
# Each BINARY runs with -test.v and its ARGS (e.g. -test.run=^TestX$);
# each FILE (podvisor, its shim) is put in /opt/podvisor, which the e2e
# harness uses instead of building (PODVISOR_E2E_BIN).
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
mkdir -p "$root"/{bin,proc,sys,tmp,dev,tests,opt/podvisor,etc}
cp "$(command -v busybox)" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
# sock_diag for TCP: Debian builds it as modules (the listen watcher's
# fallback path needs it).
mkdir -p "$root/lib/diag"
for m in inet_diag tcp_diag; do
  f=$(find "$work/k/kernel/lib/modules" -name "$m.ko*" | head -1)
  case $f in
    *.xz) xz -dc "$f" > "$root/lib/diag/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$root/lib/diag/$m.ko" ;;
    ?*) cp "$f" "$root/lib/diag/$m.ko" ;;
  esac
done
while [ "${1:-}" = -f ]; do cp "$2" "$root/opt/podvisor/"; shift 2; done
for b in "$@"; do
  bin=${b%%=*}
  cp "$bin" "$root/tests/"
  [ "$bin" = "$b" ] || printf '%s\n' "${b#*=}" > "$root/tests/$(basename "$bin").args"
done
cat > "$root/init" <<'INIT'
#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
ip link set lo up
for m in inet_diag tcp_diag; do [ -e /lib/diag/$m.ko ] && insmod /lib/diag/$m.ko; done
hostname vm
echo "VM: kernel $(cat /proc/sys/kernel/osrelease), cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
status=0
for t in /tests/*; do
  case $t in *.args) continue;; esac
  args=$(cat "$t.args" 2>/dev/null)
  echo "VM: running $t $args"
  PATH=/bin CI=true PODVISOR_E2E_BIN=/opt/podvisor PODVISOR_TEST_EMULATED=1 "$t" -test.v $args || status=1
done
echo "VMTEST-EXIT=$status"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"

boot_vm "$vmlinuz" "$work/initramfs.gz" "$work/console.log"
grep -v -E '^\s*$' "$work/console.log" | sed -n '/^VM:/,$p'
grep -q 'VMTEST-EXIT=0' "$work/console.log"
