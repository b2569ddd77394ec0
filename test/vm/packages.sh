#!/usr/bin/env bash
# The podvisor .deb on a Debian root (the systemd VM's, debootstrapped once
# and cached), in a chroot inside private mount and PID namespaces, so
# nothing outlives the test: the sysvinit path of the maintainer scripts
# (no systemd runs in a chroot; test/packages checks the systemd calls).
#   1. dpkg -i 0.0.1: the service starts, a process pod runs;
#   2. dpkg -i 0.0.2: the daemon is restarted on the new binary, the pod
#      keeps its PID and its restart count stays 0;
#   3. dpkg --purge: the pod is drained, the daemon stopped, the data dir
#      and the files gone.
# It also checks the .apk's, .ipk's and (with rpm) .rpm's metadata (apk-tools is not in
# Debian bookworm, so no Alpine-like root installs the .apk here).
#
#   test/vm/packages.sh      (from the repository's root; needs root,
#                             debootstrap, dpkg-deb, unshare)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
. "$here/lib.sh"
work=$(mktemp -d /tmp/podvisor-pkgtest.XXXXXX)
cleanup() { rm -rf "$work" "$repo/dist/v0.0.1" "$repo/dist/v0.0.2"; }
trap cleanup EXIT

# Two releases that differ in their version only.
cd "$repo"
build_debs "$work"
status=0
fail() { echo "FAIL: $*"; status=1; }

# The other formats' metadata: name, architecture, dependencies, scripts.
pkgs=dist/v0.0.1/packages/linux-amd64
info=$(tar -xzOf "$pkgs/podvisor_0.0.1_x86_64.apk" .PKGINFO 2>/dev/null || true)
grep -q '^pkgname = podvisor$' <<<"$info" && grep -q '^arch = x86_64$' <<<"$info" || fail ".apk .PKGINFO: $info"
list=$(tar -tzf "$pkgs/podvisor_0.0.1_x86_64.apk" 2>/dev/null || true)
for s in .post-install .post-upgrade .pre-deinstall .post-deinstall etc/init.d/podvisor usr/bin/podvisor-shim \
  usr/share/licenses/podvisor/LICENSE usr/share/doc/podvisor/NOTICE; do
  grep -qx -- "$s" <<<"$list" || fail ".apk lacks $s"
done
info=$(tar -xzOf "$pkgs/podvisor-containerd_0.0.1_x86_64.apk" .PKGINFO 2>/dev/null || true)
grep -q '^depend = podvisor$' <<<"$info" || fail "podvisor-containerd .apk does not depend on podvisor: $info"
mkdir "$work/ipk" && tar -C "$work/ipk" -xzf "$pkgs/podvisor_0.0.1_x86_64.ipk" && tar -C "$work/ipk" -xzf "$work/ipk/control.tar.gz"
grep -q '^Package: podvisor$' "$work/ipk/control" && [ -x "$work/ipk/postinst" ] || fail ".ipk control: $(cat "$work/ipk/control")"
if command -v rpm >/dev/null; then
  # Read whole before grep: grep -q stops at the first match, and under
  # pipefail the SIGPIPE rpm may then get fails the check.
  out=$(rpm -qp --configfiles "$pkgs/podvisor-0.0.1-1.x86_64.rpm" 2>/dev/null || true)
  grep -qx /etc/podvisor/config.yaml <<<"$out" || fail ".rpm: config.yaml is no config file"
  out=$(rpm -qp --requires "$pkgs/podvisor-containerd-0.0.1-1.x86_64.rpm" 2>/dev/null || true)
  grep -qx podvisor <<<"$out" || fail "podvisor-containerd .rpm does not require podvisor"
  out=$(rpm -qp --scripts "$pkgs/podvisor-0.0.1-1.x86_64.rpm" 2>/dev/null || true)
  grep -q '^preuninstall scriptlet' <<<"$out" || fail ".rpm has no preuninstall scriptlet"
fi
# The licence: Debian's copyright file; podhub's .apk with the MIT broker's.
list=$(dpkg-deb -c "$pkgs/podvisor_0.0.1_amd64.deb" 2>/dev/null || true)
for f in copyright NOTICE; do # files, not links to the build tree
  grep -q "^-rw-r--r-- .* ./usr/share/doc/podvisor/$f\$" <<<"$list" || fail ".deb lacks the file /usr/share/doc/podvisor/$f"
done
for f in LICENSE NOTICE LICENSE.mochi-mqtt-server; do
  [ -s "dist/v0.0.1/linux-amd64/$f" ] || fail "the release has no $f beside its binaries"
done
grep -qx usr/share/licenses/podhub/mochi-mqtt-server.LICENSE <<<"$(tar -tzf "$pkgs/podhub_0.0.1_x86_64.apk" 2>/dev/null || true)" ||
  fail "podhub .apk lacks the MIT broker's licence"
grep -qx 'Depends: podvisor' <(dpkg-deb -f "$pkgs/podvisor-containerd_0.0.1_amd64.deb" Depends | sed 's/^/Depends: /') ||
  fail "podvisor-containerd .deb does not depend on podvisor"

root="$work/root"
systemd_root "$work" "$root" # the bookworm root, used as a chroot here
mv "$work"/*.deb "$root/tmp/"
# The device's own settings, there before the package (dpkg keeps them with
# --force-confold): no cgroups, as this host's hierarchy is shared.
device_settings "$root" 'cgroups: {root: ""}'

unshare --mount --pid --fork --kill-child -- bash -s "$root" <<'INNER' || status=1
set -euo pipefail
root=$1
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
inroot() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
status=0
fail() { echo "FAIL: $*"; status=1; }
# pids_of TEXT: the PIDs whose command line is TEXT (NUL-separated words).
pids_of() { for p in "$root"/proc/[0-9]*; do [ "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" = "$1 " ] && echo "${p##*/}"; done 2>/dev/null; true; }
wait_for() { # DESCRIPTION COMMAND...
  local what=$1; shift
  for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "timed out after 20 s waiting for $what"; return 1
}
running() { inroot podvisor get pods | grep -q '^sleeper .*Running'; }

inroot dpkg -i --force-confold /tmp/podvisor_0.0.1_amd64.deb >/tmp/pkgtest-dpkg.log 2>&1 || { cat /tmp/pkgtest-dpkg.log; exit 1; }
wait_for "the pod to run after install" running || { inroot podvisor get pods || true; tail -20 "$root/var/log/podvisor.log"; exit 1; }
pod=$(pids_of "sleep 100000"); daemon=$(cat "$root/run/podvisor.pid")
echo "installed 0.0.1: daemon $daemon, pod $pod"
[ -L "$root/etc/rc2.d/S01podvisor" ] || ls "$root"/etc/rc2.d/*podvisor* >/dev/null 2>&1 || fail "update-rc.d made no rc2.d link"
[ "$(cat "$root/etc/podvisor/config.yaml")" = 'cgroups: {root: ""}' ] || fail "dpkg replaced the device's config"

inroot dpkg -i --force-confold /tmp/podvisor_0.0.2_amd64.deb >/tmp/pkgtest-dpkg.log 2>&1 || { cat /tmp/pkgtest-dpkg.log; exit 1; }
daemon2=$(cat "$root/run/podvisor.pid")
wait_for "the new daemon to serve" running
pod2=$(pids_of "sleep 100000")
echo "upgraded to 0.0.2: daemon $daemon2, pod $pod2"
[ "$daemon2" != "$daemon" ] && kill -0 "$daemon2" || fail "the daemon was not restarted on the upgrade ($daemon -> $daemon2)"
version=$(inroot podvisor version)
grep -q '^daemon *v0.0.2 ' <<<"$version" || fail "the running daemon is not the new one: $version"
[ -n "$pod" ] && [ "$pod2" = "$pod" ] || fail "the pod's PID changed across the upgrade: $pod -> $pod2"
restarts=$(inroot podvisor get pod sleeper -o json | grep -o '"restartCount": *[0-9]*' | grep -o '[0-9]*$')
[ "$restarts" = 0 ] || fail "restartCount after the upgrade: $restarts"

inroot dpkg --purge podvisor >/tmp/pkgtest-dpkg.log 2>&1 || { cat /tmp/pkgtest-dpkg.log; exit 1; }
[ -z "$(pids_of "sleep 100000")" ] || fail "the pod still runs after purge"
! kill -0 "$daemon2" 2>/dev/null || fail "the daemon still runs after purge"
[ ! -e "$root/var/lib/podvisor" ] || fail "purge left /var/lib/podvisor"
[ ! -e "$root/usr/bin/podvisor" ] && [ ! -e "$root/etc/init.d/podvisor" ] || fail "purge left the binary or the init script"
echo "purged: pod and daemon stopped, data dir removed"
exit $status
INNER
[ $status = 0 ] && echo "ok: the .deb installs, upgrades with the pod's PID kept, and purges; .apk/.ipk metadata"
exit $status
