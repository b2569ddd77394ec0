#!/usr/bin/env bash
# Boots a minimal Debian with systemd (PID 1), dbus and logind in a VM and
# runs podvisor there as the packaged service with the systemd cgroup
# driver, to check what needs a real systemd:
#   - pods in slices and containers in scopes, with their limits;
#   - shims in podvisor.service's delegated cgroup, surviving a kill -9 of
#     the daemon (KillMode=process) and adopted by the next one;
#   - OOMKilled from a scope systemd has already removed;
#   - containerd pods with runc's systemd cgroup driver: their scopes in
#     the pod slices, limits, exec, OOMKilled, a shared PID namespace, and
#     adoption after a kill -9 of the daemon (Debian's containerd and runc,
#     copied from this host; runc chroots, as the root is an initramfs);
#   - logind: a delay inhibitor lock, InhibitDelayMaxSec raised to the
#     shutdown buckets' sum, and on `systemctl poweroff` the pods stopped
#     lowest priority first before the lock is released.
#
#   - the watchdog: a daemon whose loop is stalled on purpose is ended
#     (SIGABRT) and restarted by systemd, its pods adopted;
#   - the self-update through the unit (systemd-update-check.sh): podhub
#     runs in the VM (a transient unit), the device enrolled; a release of
#     V2 (this tree, stamped above the device's version) is pushed and
#     rolled out: the daemon executes the launcher in its own process
#     (RELOADING=1: systemd shows the unit reloading), which starts V2 on
#     trial; V2 adopts the pods, sends READY=1 and commits. The hub shows
#     the update complete and the device on V2; systemd's main PID is the
#     same and NRestarts unchanged, the pods' PIDs (process and
#     containerd) too. Then a V3 that only exits 1: systemd restarts it
#     twice, the launcher counts the trial's starts and rolls back to V2
#     (its line in the journal); the hub shows the update halted with the
#     device's RolledBack reason, the pods' PIDs unchanged;
#
#   test/vm/systemd.sh BIN_DIR IMAGE-ARCHIVE TESTSTALL-PODVISOR RELEASE-DIR
#
# BIN_DIR holds podvisor, podvisor-shim and podvisor-containerd (and
# podhub); IMAGE-ARCHIVE is an OCI archive of podvisor.test/busybox:1;
# TESTSTALL-PODVISOR is podvisor built with -tags podvisor_teststall
# (make teststall-bin), which replaces /usr/bin/podvisor for the daemons
# systemd restarts from the kill -9 check on; its version stamp is the
# device's before the update. RELEASE-DIR holds V2's three binaries,
# stamped with a higher semantic version (make vmrelease-bins). V3 is
# built here, from a throwaway module.
# Needs debootstrap, qemu-system-x86, cpio, containerd and runc. The root file system is
# debootstrapped once (about a minute) and cached in $PODVISOR_VM_CACHE
# (default ~/.cache/podvisor-vm).
set -euo pipefail
bin=$(cd "$1" && pwd) image=$2 teststall=$3 v2=${4:?usage: test/vm/systemd.sh BIN_DIR IMAGE-ARCHIVE TESTSTALL-PODVISOR RELEASE-DIR (make teststall-bin vmrelease-bins)}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
work=$(mktemp -d /tmp/podvisor-sdvm.XXXXXX)
trap 'rm -rf "$work"' EXIT

vmlinuz=$(fetch_kernel "$work/k")
root="$work/root"
systemd_root "$work" "$root"
echo podvisor-vm > "$root/etc/hostname"

install -m 755 "$bin/podvisor" "$bin/podvisor-shim" "$bin/podvisor-containerd" "$root/usr/bin/"
mkdir -p "$root/usr/local/lib/podvisor-teststall"
install -m 755 "$teststall" "$root/usr/local/lib/podvisor-teststall/podvisor"
# The self-update: podhub, V2, and V3, a program that only fails; its
# main package's path ends in /cmd/podvisor, so podhub takes it for
# podvisor.
install -m 755 "$bin/podhub" "$root/usr/bin/"
install -m 644 "$here/systemd-update-check.sh" "$root/usr/local/bin/"
release="$root/usr/local/lib/podvisor-release"
mkdir -p "$release/v2" "$release/v3" "$work/broken/cmd/podvisor"
install -m 755 "$v2/podvisor" "$v2/podvisor-shim" "$v2/podvisor-containerd" "$release/v2/"
printf 'module example.com/broken\n\ngo 1.22\n' > "$work/broken/go.mod"
cat > "$work/broken/cmd/podvisor/main.go" <<'EOF'
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "broken on purpose")
	os.Exit(1)
}
EOF
(cd "$work/broken" && CGO_ENABLED=0 GOFLAGS= GOWORK=off go build -trimpath -ldflags "-s -w" -o "$release/v3/podvisor" ./cmd/podvisor)
# This host's containerd, shim and runc (Debian's, as the VM's), with any
# library the VM's root lacks.
for b in /usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/sbin/runc; do
  install -m 755 "$b" "$root$b"
  for lib in $(ldd "$b" | grep -o '/[^ ]*'); do
    [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
  done
done
mkdir -p "$root/etc/containerd" "$root/var/lib/podvisor/images"
cp "$image" "$root/var/lib/podvisor/images/busybox.tar"
cat > "$root/etc/containerd/config.toml" <<'EOF'
version = 2
disabled_plugins = ["io.containerd.grpc.v1.cri"]
EOF
cat > "$root/etc/systemd/system/containerd.service" <<'EOF'
[Unit]
Description=containerd
[Service]
ExecStart=/usr/bin/containerd
Delegate=yes
KillMode=process
[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/containerd.service "$root/etc/systemd/system/multi-user.target.wants/"
install -m 644 "$here/../../packaging/systemd/podvisor.service" "$root/etc/systemd/system/"
ln -sf /etc/systemd/system/podvisor.service "$root/etc/systemd/system/multi-user.target.wants/"
mkdir -p "$root/etc/systemd/system/podvisor.service.d"
printf '[Service]\nStandardError=journal+console\n' > "$root/etc/systemd/system/podvisor.service.d/console.conf"

mkdir -p "$root/etc/podvisor/manifests" "$root/etc/podvisor/priorityclasses"
cat > "$root/etc/podvisor/config.yaml" <<'EOF'
cgroups:
  driver: systemd
# overlay is a module the VM does not load; runc cannot pivot_root out of
# an initramfs.
containerd: {snapshotter: native, noPivotRoot: true}
shutdownGracePeriodByPodPriority:
- {priority: 0, shutdownGracePeriodSeconds: 4}
- {priority: 1000, shutdownGracePeriodSeconds: 4}
EOF
for c in low:100 high:1000; do
  printf 'apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: %s\n' "${c%:*}" "${c#*:}" \
    > "$root/etc/podvisor/priorityclasses/${c%:*}.yaml"
done
# low: Burstable; high: Guaranteed. Each says on the console when SIGTERM
# reaches it: the shell waits on its sleep with `wait`, which a trapped
# signal interrupts (a foreground sleep would hold the trap until it ends),
# and high's CPU limit leaves it room to run in a software-emulated VM that
# is busy shutting down.
pod() { # name class requests limits
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  runtimeClassName: process
  priorityClassName: $2
  terminationGracePeriodSeconds: 3
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "trap 'echo VM: stopped $1 >/dev/console; exit 0' TERM; while :; do sleep 1 & wait \$!; done"]
    resources: {requests: $3, limits: $4}
EOF
}
pod low low '{cpu: 100m, memory: 16Mi}' '{memory: 64Mi}' > "$root/etc/podvisor/manifests/low.yaml"
pod high high '{cpu: 500m, memory: 32Mi}' '{cpu: 500m, memory: 32Mi}' > "$root/etc/podvisor/manifests/high.yaml"
cat > "$root/etc/podvisor/manifests/hog.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  runtimeClassName: process
  restartPolicy: Never
  containers:
  - name: app
    image: host
    command: ["tail", "/dev/zero"]
    resources: {limits: {memory: 32Mi}}
EOF

vm_check "$root" "$here/systemd-check.sh" "podvisor VM checks" podvisor.service

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"
rm -rf "$root"
echo "systemd.sh: booting (software emulation)"
boot_vm "$vmlinuz" "$work/initramfs.gz" "$work/console.log"
# The daemon the watchdog ends prints every goroutine's stack: its first
# line shows, the rest is left out.
tr -d '\r' < "$work/console.log" | grep -E 'VM:|VMTEST|podvisor\[|Power down' | sed 's/^\[ *[0-9.]*\] //' | grep -v -E 'level=(DEBUG|INFO) msg="(container|pod)' |
  awk '/podvisor\[[0-9]+\]: SIGABRT: abort/ { match($0, /podvisor\[[0-9]+\]/); dump = substr($0, RSTART, RLENGTH); print; next }
       dump != "" && index($0, dump ": ") == 1 { next } { print }' || true

# The checks inside passed, then the shutdown: the daemon stopped low before
# high, SIGTERM reached each (its trap's line), and no pod was left running
# when podvisor released its inhibitor lock. The order is read from the
# daemon's own lines: the pods' lines say SIGTERM arrived, but when their
# shells get to print depends on the emulated VM's scheduling.
log=$(tr -d '\r' < "$work/console.log")
line() { grep -n -m1 -F -e "$1" <<<"$log" | cut -d: -f1; }
status=0
grep -q 'VMTEST-EXIT=0' <<<"$log" || { echo "FAIL: the checks inside the VM failed"; status=1; }
low=$(line 'msg="Stopping container app" pod=default/low'); high=$(line 'msg="Stopping container app" pod=default/high')
drained=$(line 'drain complete: no pod is running'); released=$(line 'released the shutdown lock')
termLow=$(line 'VM: stopped low'); termHigh=$(line 'VM: stopped high')
if [ -z "$low" ] || [ -z "$high" ] || [ -z "$drained" ] || [ -z "$released" ]; then
  echo "FAIL: shutdown: stopping low at line ${low:-none}, high at ${high:-none}, drained at ${drained:-none}, lock released at ${released:-none}"
  status=1
elif ! [ "$low" -lt "$high" ] || ! [ "$high" -lt "$drained" ] || ! [ "$drained" -lt "$released" ]; then
  echo "FAIL: shutdown order: stopping low at line $low, high at $high, drained at $drained, lock released at $released"
  status=1
elif [ -z "$termLow" ] || [ -z "$termHigh" ]; then
  echo "FAIL: SIGTERM's trap printed for low at line ${termLow:-none}, for high at ${termHigh:-none}"
  status=1
else
  echo "ok: on poweroff the low-priority pod was stopped first, then the high one (SIGTERM reached both), then the lock was released with no pod running"
fi
grep -q 'Power down' <<<"$log" || { echo "FAIL: the VM did not power down"; status=1; }
exit $status
