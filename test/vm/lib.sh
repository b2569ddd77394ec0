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
