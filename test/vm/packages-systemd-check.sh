#!/bin/sh
# Runs inside the VM of test/vm/packages-systemd.sh as vm-check.service:
# the podvisor .deb installed, upgraded and purged under systemd, then
# powers off. Prints "VM: ok ..." per check and VMTEST-EXIT=0 when all
# passed.
. "$(dirname "$0")/check-lib.sh" # ok, until_ok
status=0
fail() { echo "VM: FAIL $*"; status=1; }
running() { podvisor get pod sleeper -o json | grep -q '"phase": "Running"'; }
pod_pid() { for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" = "sleep 100000 " ] && basename "$p"; done; }
main_pid() { systemctl show -P MainPID podvisor.service; }
restarts() { podvisor get pod sleeper -o json | sed -n 's/.*"restartCount": *\([0-9]*\).*/\1/p' | head -1; }

dpkg -i --force-confold /root/podvisor_0.0.1_amd64.deb > /tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -i 0.0.1"; }
systemctl is-enabled --quiet podvisor.service && ok "installed: podvisor.service enabled" || fail "podvisor.service is not enabled"
until_ok 90 running && ok "installed: sleeper Running" || fail "sleeper not Running: $(podvisor get pods 2>&1)"
pod=$(pod_pid); daemon=$(main_pid)
echo "VM: 0.0.1: daemon $daemon, pod $pod"

dpkg -i --force-confold /root/podvisor_0.0.2_amd64.deb > /tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -i 0.0.2"; }
until_ok 60 running || fail "sleeper not Running after the upgrade: $(podvisor get pods 2>&1)"
daemon2=$(main_pid); pod2=$(pod_pid)
echo "VM: 0.0.2: daemon $daemon2, pod $pod2"
[ "$daemon2" != "$daemon" ] && [ "$daemon2" != 0 ] && ok "the upgrade restarted the daemon ($daemon -> $daemon2)" || fail "daemon $daemon -> $daemon2"
podvisor version | grep -q '^daemon *v0.0.2 ' && ok "the running daemon is 0.0.2" || fail "version: $(podvisor version 2>&1)"
[ -n "$pod" ] && [ "$pod2" = "$pod" ] && ok "the pod kept its PID $pod across the upgrade" || fail "pod PID $pod -> $pod2"
[ "$(restarts)" = 0 ] && ok "restartCount 0 after the upgrade" || fail "restartCount $(restarts)"

dpkg --purge podvisor > /tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg --purge"; }
sleep 1
[ -z "$(pod_pid)" ] && ok "purge: the pod was drained" || fail "purge: the pod still runs ($(pod_pid))"
! systemctl is-active --quiet podvisor.service && ! systemctl is-enabled --quiet podvisor.service 2>/dev/null &&
  ok "purge: the service is stopped and disabled" || fail "purge: podvisor.service $(systemctl is-active podvisor.service)"
[ ! -e /var/lib/podvisor ] && [ ! -e /usr/bin/podvisor ] && ok "purge: data dir and binaries gone" || fail "purge left files"

echo "VMTEST-EXIT=$status"
systemctl poweroff --no-block
