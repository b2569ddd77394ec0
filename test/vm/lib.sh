# Shared by the VM test scripts (sourced, not run).

# fetch_kernel DIR: unpacks Debian's current amd64 kernel package into DIR
# and prints the path of its vmlinuz.
fetch_kernel() {
  local dir=$1 pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
  [ -n "$pkg" ] || { echo "vm: cannot find the kernel package (run apt-get update)" >&2; return 2; }
  mkdir -p "$dir"
  (cd "$dir" && apt-get download -qq "$pkg" 2>/dev/null)
  dpkg-deb -x "$dir"/*.deb "$dir/kernel"
  ls "$dir"/kernel/boot/vmlinuz-* | head -1
}

# boot_vm VMLINUZ INITRAMFS LOG: boots with software emulation (KVM hangs
# on this project's CI hosts), console on the serial port, into LOG.
boot_vm() {
  timeout 600 qemu-system-x86_64 -m 1024 -smp 2 -nographic -no-reboot \
    -kernel "$1" -initrd "$2" \
    -append "console=ttyS0 quiet psi=1 panic=-1 systemd.show_status=0" > "$3" 2>&1 || true
}

# systemd_root WORK ROOT: unpacks a Debian bookworm root with systemd into
# ROOT, made to boot as the initramfs (systemd as /init, no getty or
# periodic jobs). The root is debootstrapped once (about a minute) and
# cached in $PODVISOR_VM_CACHE (default ~/.cache/podvisor-vm).
systemd_root() {
  local work=$1 root=$2 suite=bookworm cache=${PODVISOR_VM_CACHE:-$HOME/.cache/podvisor-vm} u lock
  mkdir -p "$cache"
  # The package and systemd stages may run at once (make -j): the first
  # debootstraps under the lock, the other waits for the tar it makes.
  exec {lock}>"$cache/rootfs-$suite.lock"
  flock "$lock"
  if [ ! -s "$cache/rootfs-$suite.tar" ]; then
    echo "vm: debootstrapping $suite with systemd (once; cached in $cache)" >&2
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus "$suite" "$work/bootstrap" \
      >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; return 2; }
    tar -C "$work/bootstrap" -cf "$cache/rootfs-$suite.tar.tmp" .
    mv "$cache/rootfs-$suite.tar.tmp" "$cache/rootfs-$suite.tar"
    rm -rf "$work/bootstrap"
  fi
  exec {lock}>&-
  mkdir -p "$root"
  tar -C "$root" -xf "$cache/rootfs-$suite.tar"
  rm -rf "$root"/usr/share/{doc,man,locale,info,zoneinfo} "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/*
  # The kernel runs /init from an initramfs: make it systemd, after giving
  # the root (a tmpfs of half the memory by default) room for the images,
  # binaries and update slots the tests add, so that the daemon's hard
  # imagefs.available<15% threshold does not evict their pods. Its pages
  # are the memory they would take anyway. Nothing waits for a serial
  # getty (no udev here) or runs periodic jobs.
  printf '#!/bin/sh\nmount -o remount,size=90%% / 2>/dev/null\nexec /lib/systemd/systemd "$@"\n' > "$root/init"
  chmod 755 "$root/init"
  ln -sf /lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
  for u in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer apt-daily-upgrade.timer \
    dpkg-db-backup.timer e2scrub_all.timer fstrim.timer e2scrub_reap.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$u"
  done
}

# vm_check ROOT SCRIPT DESCRIPTION AFTER: installs SCRIPT as the VM's
# /usr/local/bin/vm-check (check-lib.sh beside it), run once at boot after
# the unit AFTER by vm-check.service, its output on the console.
vm_check() {
  local root=$1
  install -m 755 "$2" "$root/usr/local/bin/vm-check"
  install -m 644 "$(dirname "${BASH_SOURCE[0]}")/check-lib.sh" "$root/usr/local/bin/"
  cat > "$root/etc/systemd/system/vm-check.service" <<EOF2
[Unit]
Description=$3
After=$4
[Service]
Type=oneshot
StandardOutput=journal+console
StandardError=journal+console
ExecStart=/usr/local/bin/vm-check
[Install]
WantedBy=multi-user.target
EOF2
  ln -sf /etc/systemd/system/vm-check.service "$root/etc/systemd/system/multi-user.target.wants/"
}

# build_debs DIR: builds releases v0.0.1 and v0.0.2 for amd64, which
# differ in their version only, into dist/ (run from the repository's
# root; the caller removes them) and copies their podvisor .deb to DIR.
build_debs() {
  local v
  for v in 0.0.1 0.0.2; do
    packaging/release.sh "v$v" amd64 >/dev/null
    packaging/packages.sh "v$v" amd64 >/dev/null
    cp "dist/v$v/packages/linux-amd64/podvisor_${v}_amd64.deb" "$1/"
  done
}

# device_settings ROOT CONFIG: what the device holds before the package
# is installed (dpkg keeps it): /etc/podvisor/config.yaml saying CONFIG,
# and a process pod, sleeper (sleep 100000), in the manifests directory.
device_settings() {
  mkdir -p "$1/etc/podvisor/manifests"
  printf '%s\n' "$2" > "$1/etc/podvisor/config.yaml"
  cat > "$1/etc/podvisor/manifests/sleeper.yaml" <<'YAML'
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
}
