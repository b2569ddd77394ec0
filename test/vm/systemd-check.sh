#!/bin/sh
# Runs inside the systemd VM (test/vm/systemd.sh) as vm-check.service, then
# powers the VM off through logind. Prints "VM: ok ..." per check and
# VMTEST-EXIT=0 when all passed.
. "$(dirname "$0")/check-lib.sh" # ok, until_ok
status=0
fail() { echo "FAIL $*" | sed 's/^/VM: /'; status=1; }
running() { podvisor get pod "$1" -o json | grep -q '"phase": "Running"'; }
uid_of() { podvisor get pod "$1" -o json | sed -n 's/^ *"uid": "\(.*\)",$/\1/p' | head -1 | tr - _; }
pid_of() { # the pid of the pod's shell, found by its command line (one fork a process: emulated forks are slow)
  for p in /proc/[0-9]*; do
    case "$(tr '\0' ' ' 2>/dev/null < "$p/cmdline")" in "sh -c trap 'echo VM: stopped $1 "*) echo "${p#/proc/}"; return ;; esac
  done
}

until_ok 60 running low && until_ok 10 running high || fail "pods low and high not Running: $(podvisor get pods 2>&1)"
podvisor get pods

# Type=notify: the unit is active once podvisor said READY (vm-check runs
# after it), and its status line says how podvisor is.
statustext() { systemctl show -P StatusText podvisor | grep -Eq "$1"; }
[ "$(systemctl show -P Type podvisor)" = notify ] && [ "$(systemctl show -P NotifyAccess podvisor)" = main ] &&
  [ "$(systemctl show -P WatchdogUSec podvisor)" = 30s ] && ok "podvisor.service is Type=notify, NotifyAccess=main, WatchdogSec=30" ||
  fail "unit: $(systemctl show -p Type,NotifyAccess,WatchdogUSec podvisor)"
until_ok 5 statustext '^running [0-9]+ pods( \(.*\))?$' && [ "$(systemctl show -P ActiveState podvisor)" = active ] &&
  ok "active, status: $(systemctl show -P StatusText podvisor)" || fail "$(systemctl show -p ActiveState,StatusText podvisor)"
echo "VM: $(systemctl status podvisor --no-pager | grep -m1 'Status:')"

# Slices and scopes, with their limits, made through systemd.
low=$(uid_of low); high=$(uid_of high)
lowscope=/podvisor.slice/podvisor-burstable.slice/podvisor-burstable-pod$low.slice/podvisor-$low-app.scope
highslice=podvisor-pod$high.slice
cg=$(sed -n 's/^0:://p' "/proc/$(pid_of low)/cgroup")
[ "$cg" = "$lowscope" ] && ok "low's container runs in its scope $cg" || fail "low's container is in '$cg', want $lowscope"
systemctl is-active --quiet "podvisor-burstable-pod$low.slice" "$highslice" "podvisor-$high-app.scope" &&
  ok "pod slices and container scopes are active units" || fail "units: $(systemctl list-units 'podvisor*' --no-legend 2>&1)"
got=$(systemctl show -P MemoryMax "$highslice"); [ "$got" = 33554432 ] && ok "MemoryMax of $highslice is 32Mi (systemd)" || fail "MemoryMax of $highslice: $got"
got=$(cat "/sys/fs/cgroup/podvisor.slice/$highslice/podvisor-$high-app.scope/memory.max")
[ "$got" = 33554432 ] && ok "memory.max of high's scope is 32Mi" || fail "memory.max of high's scope: $got"
got=$(cat "/sys/fs/cgroup/podvisor.slice/$highslice/podvisor-$high-app.scope/cpu.max")
[ "$got" = "50000 100000" ] && ok "cpu.max of high's scope is 50000 100000" || fail "cpu.max of high's scope: $got"
shim=$(sed -n 's/^PPid:\t*//p' "/proc/$(pid_of low)/status")
cg=$(sed -n 's/^0:://p' "/proc/$shim/cgroup")
[ "$cg" = /system.slice/podvisor.service/shims ] && ok "shims live in podvisor.service/shims" || fail "shim $shim is in '$cg'"

# A container OOM-killed in its scope: systemd removes the scope, the
# daemon still says OOMKilled.
until_ok 30 sh -c 'podvisor get pod hog -o json | grep -q "\"reason\": \"OOMKilled\""' &&
  ok "hog is OOMKilled" || fail "hog: $(podvisor get pod hog -o json | grep -A6 terminated)
    $(systemctl list-units --all --no-legend 'podvisor-*hog*' 'podvisor-*.scope' 2>&1)
    $(systemctl show -p Result,ActiveState "podvisor-$(uid_of hog)-app.scope" 2>&1)
    $(cat /var/lib/podvisor/containers/*/shim.log 2>&1)"
# Which way it was judged: by the shim from the scope, or, when systemd had
# removed the scope first, by the daemon from the pod's slice.
if grep -qs "cannot tell whether" /var/lib/podvisor/containers/*/shim.log; then
  echo "VM: note: hog's scope was gone before its shim looked; judged by the pod slice's count"
else
  echo "VM: note: hog judged by its shim from the scope's memory.events"
fi

# containerd pods: runc's systemd driver puts each container in a scope
# named by its containerd ID in the pod's slice; the pod shares one PID
# namespace whose init is podvisor-shim.
cat > /etc/podvisor/manifests/ctr.yaml <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: ctr}
spec:
  hostNetwork: true
  shareProcessNamespace: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: podvisor.test/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "echo started; exec sleep 100000"]
    resources: {requests: {memory: 16Mi}, limits: {memory: 32Mi, cpu: 100m}}
  - name: side
    image: podvisor.test/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "100001"]
EOF
cat > /etc/podvisor/manifests/ctrhog.yaml <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: ctrhog}
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - {name: app, image: podvisor.test/busybox:1, imagePullPolicy: Never, command: ["tail", "/dev/zero"], resources: {limits: {memory: 32Mi}}}
EOF
# Every container of the pod ready (READY n/n): its containers start side
# by side, so one ready container says nothing of the other.
ready() { podvisor get pods 2>/dev/null | awk -v p="$1" '$1 == p { split($2, r, "/"); found = r[1] > 0 && r[1] == r[2] } END { exit !found }'; }
until_ok 180 ready ctr || fail "containerd pod ctr not ready: $(podvisor get pods 2>&1; podvisor images 2>&1; journalctl -u podvisor --no-pager | tail -20)"
ctrid=$(podvisor get pod ctr -o json | sed -n 's|^ *"containerID": "containerd://\(.*_app_[0-9]*\)",$|\1|p' | head -1)
ctruid=$(uid_of ctr)
ctrscope=/podvisor.slice/podvisor-burstable.slice/podvisor-burstable-pod$ctruid.slice/podvisor-$ctrid.scope
ctrpid=$(head -1 "/sys/fs/cgroup$ctrscope/cgroup.procs" 2>/dev/null)
[ -n "$ctrpid" ] && [ "$(sed -n 's/^0:://p' "/proc/$ctrpid/cgroup")" = "$ctrscope" ] &&
  ok "ctr's container runs in the scope $ctrscope" || fail "no process of ctr in $ctrscope: $(systemctl list-units --no-legend 'podvisor-*' 2>&1)"
systemctl is-active --quiet "podvisor-$ctrid.scope" && ok "podvisor-$ctrid.scope is an active unit" || fail "scope unit: $(systemctl status "podvisor-$ctrid.scope" 2>&1 | head -5)"
got=$(cat "/sys/fs/cgroup$ctrscope/memory.max" 2>&1); [ "$got" = 33554432 ] && ok "memory.max of ctr's scope is 32Mi" || fail "memory.max of ctr's scope: $got"
out=$(podvisor exec ctr -c side -- sh -c 'cat /proc/self/cgroup; tr "\0" " " < /proc/1/cmdline; echo; ps -o args' 2>&1)
echo "$out" | grep -q "podvisor-shim --pod-init" && echo "$out" | grep -q "sleep 100000" &&
  ok "exec in ctr: the pod's init is pid 1 and side sees app's process" || fail "exec in ctr: $out"
podvisor logs ctr -c app | grep -q started && ok "ctr's log" || fail "ctr's log: $(podvisor logs ctr -c app 2>&1)"
until_ok 90 sh -c 'podvisor get pod ctrhog -o json | grep -q "\"reason\": \"OOMKilled\""' &&
  ok "ctrhog (containerd) is OOMKilled" || fail "ctrhog: $(podvisor get pod ctrhog -o json | grep -A6 -E 'terminated|waiting')"

# The daemon killed with SIGKILL: systemd restarts it alone; the pods keep
# their processes and are adopted. The daemon it restarts is the test
# build (-tags podvisor_teststall: SIGUSR2 stalls its loop, for the
# watchdog check below), swapped in under the packaged unit.
before=$(pid_of low)
cp /usr/local/lib/podvisor-teststall/podvisor /usr/bin/podvisor.new && mv /usr/bin/podvisor.new /usr/bin/podvisor
systemctl kill -s KILL --kill-whom=main podvisor.service
sleep 1.5
until_ok 20 sh -c 'podvisor get pods' || fail "podvisor did not come back"
[ "$(pid_of low)" = "$before" ] && until_ok 10 running low &&
  ok "after kill -9 of the daemon, low runs on as pid $before, adopted" || fail "low after the daemon's restart: $(pid_of low), was $before"
until_ok 20 ready ctr && [ "$(head -1 "/sys/fs/cgroup$ctrscope/cgroup.procs" 2>/dev/null)" = "$ctrpid" ] &&
  podvisor get pod ctr -o json | grep -q "containerd://$ctrid" &&
  ok "after kill -9 of the daemon, ctr's container $ctrid is adopted" || fail "ctr after the daemon's restart: $(podvisor get pods 2>&1)"
# Type=notify: systemd saw the restarted daemon started only at its READY,
# after it had adopted its pods (Type=simple would say Started at once).
since=$(journalctl -u podvisor -o cat --no-pager | grep -n 'Starting podvisor' | tail -1 | cut -d: -f1)
after=$(journalctl -u podvisor -o cat --no-pager | tail -n +"${since:-1}")
adopted=$(echo "$after" | grep -n -m1 'adopted running container' | cut -d: -f1)
started=$(echo "$after" | grep -n -m1 'Started podvisor' | cut -d: -f1)
[ -n "$adopted" ] && [ -n "$started" ] && [ "$adopted" -lt "$started" ] &&
  ok "after the restart, systemd saw podvisor started (READY) only after it adopted its pods" ||
  fail "restart: adopted at line ${adopted:-none}, started at ${started:-none} of: $(echo "$after" | head -30)"

# The hub for the self-update checks below (systemd-update-check.sh):
# podhub in the VM, the device enrolled; the daemon the watchdog restarts
# reads its hub section (no restart of its own).
. "$(dirname "$0")/systemd-update-check.sh"
hub_start

# The watchdog: a daemon whose loop is wedged, the process otherwise alive
# (its API's goroutines run on), stops pinging; systemd ends it (SIGABRT,
# which prints every goroutine's stack) and restarts it; the pods run on
# and are adopted. The test build's loop takes SIGUSR2 as a request: it
# pings a last time, asking for an 8 s watchdog period (WATCHDOG_USEC=,
# so the check waits seconds, not the unit's 30), and blocks.
wdstart=$(cut -d. -f1 /proc/uptime)
main=$(systemctl show -P MainPID podvisor)
restarts=$(systemctl show -P NRestarts podvisor)
low_before=$before high_before=$(pid_of high) # low's: checked after the kill -9 above
until_ok 20 ready ctr || fail "ctr not ready after the restart: $(podvisor get pods 2>&1)"
stalled=$(date +%s)
kill -USR2 "$main"
sleep 0.5
# Wedged, not stopped: the API's goroutines answer from the published
# view (get pods), what needs the loop (get node) waits.
timeout 3 podvisor get pods >/dev/null 2>&1 && ! timeout 2 podvisor get node >/dev/null 2>&1 &&
  ok "stalled: $main answers get pods, not get node (its loop)" || fail "stall: get pods and get node of $main: $(timeout 2 podvisor get node 2>&1 | head -3)"
newmain() { m=$(systemctl show -P MainPID podvisor); [ "$m" != 0 ] && [ "$m" != "$main" ] && systemctl is-active --quiet podvisor; }
until_ok 60 newmain && ok "the watchdog restarted the stalled daemon ($main, now $(systemctl show -P MainPID podvisor)) $(( $(date +%s) - stalled )) s after the stall" ||
  fail "watchdog: $(systemctl show -p MainPID,ActiveState,StatusText podvisor; journalctl -u podvisor --no-pager | tail -15)"
# journald may take the ended daemon's stack (its pipe) and systemd's
# lines a moment after the unit is active again.
since_stall() { journalctl -u podvisor -o cat --no-pager --since "@$stalled"; }
in_journal() { since_stall | awk '/Watchdog timeout/ { t = 1 } t && /Started podvisor/ { s = 1 } /^SIGABRT: abort/ { a = 1 } END { exit !(t && s && a) }'; }
until_ok 20 in_journal
log=$(since_stall)
echo "$log" | grep -q 'test build: SIGUSR2 stalls the loop' || fail "no stall logged: $(echo "$log" | head -5)"
timedout=$(echo "$log" | grep -n -m1 'Watchdog timeout' | cut -d: -f1)
echo "$log" | grep -q "Killing process $main (podvisor) with signal SIGABRT" && echo "$log" | grep -q '^SIGABRT: abort' &&
  ok "systemd logged the watchdog timeout ($(echo "$log" | grep -o -m1 'limit [0-9]*s')), ended $main with SIGABRT, its goroutines are in the journal" ||
  fail "watchdog kill not in the journal: $(echo "$log" | grep -v '^goroutine\|^\s\|^$' | head -20)"
echo "$log" | grep -E 'Watchdog timeout|with signal SIGABRT|Main process exited|restart counter|Started podvisor' | sed 's/^/VM:   systemd: /'
started=$(echo "$log" | grep -n 'Started podvisor' | tail -1 | cut -d: -f1)
[ -n "$timedout" ] && [ -n "$started" ] && [ "$started" -gt "$timedout" ] && [ "$(systemctl show -P NRestarts podvisor)" = $((restarts + 1)) ] &&
  ok "restarted by systemd (NRestarts $restarts -> $(systemctl show -P NRestarts podvisor)) and READY again" ||
  fail "restart: timeout at line ${timedout:-none}, started at ${started:-none}; $(systemctl show -p NRestarts,ActiveState podvisor)"
until_ok 20 running low && [ "$(pid_of low)" = "$low_before" ] && [ "$(pid_of high)" = "$high_before" ] && until_ok 20 ready ctr &&
  [ "$(head -1 "/sys/fs/cgroup$ctrscope/cgroup.procs" 2>/dev/null)" = "$ctrpid" ] &&
  ok "after the watchdog's restart, low ($low_before), high ($high_before) and ctr run on, adopted" ||
  fail "after the watchdog's restart: low $(pid_of low) (was $low_before), high $(pid_of high) (was $high_before); $(podvisor get pods 2>&1)"
until_ok 30 statustext '^running [0-9]+ pods( \(.*\))?; hub connected' && ok "status again, the hub's connection in it: $(systemctl show -P StatusText podvisor)" ||
  fail "status after the watchdog's restart: $(systemctl show -p StatusText podvisor)"
echo "VM: $(systemctl show -p StatusText,NRestarts,MainPID podvisor | tr '\n' ' ')"
echo "VM: the watchdog check took $(($(cut -d. -f1 /proc/uptime) - wdstart)) s"

# The self-update through the unit: to v2 with the pods untouched, then a
# v3 that fails at every start, rolled back by the launcher.
update_checks

# The containerd pods go before the shutdown check, which is about low and high.
rm /etc/podvisor/manifests/ctr.yaml /etc/podvisor/manifests/ctrhog.yaml
until_ok 30 sh -c '! podvisor get pods | grep -q ctr' && ! systemctl is-active --quiet "podvisor-$ctrid.scope" &&
  ok "ctr removed, its scope gone" || fail "ctr removal: $(podvisor get pods 2>&1; systemctl list-units --no-legend 'podvisor-*' 2>&1)"

# logind: a delay lock held by podvisor, and room for the buckets (4+4 s).
systemd-inhibit --list --no-pager | grep -q 'podvisor.*delay' && ok "podvisor holds a shutdown delay lock" ||
  fail "inhibitors: $(systemd-inhibit --list --no-pager 2>&1)"
got=$(busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec)
[ "$got" = "t 8000000" ] && ok "InhibitDelayMaxSec raised to 8 s" || fail "InhibitDelayMaxUSec: $got"

echo "VMTEST-EXIT=$status"
# The shutdown itself is judged from the console by systemd.sh.
systemctl poweroff
