#!/bin/sh
# Runs inside the arm64 VM (test/vm/arm64.sh) as the initramfs's check:
# podvisor's process runtime on cgroup v2 with the cgroupfs driver. Prints
# "VM: PASS ..." or "VM: FAIL ..." per check, "VM: time ..." per timing,
# and exits non-zero when a check failed.
status=0
pass() { echo "VM: PASS $*"; }
fail() { echo "VM: FAIL $*"; status=1; }
now() { cut -d' ' -f1 /proc/uptime; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'; }
# until_ok SECONDS CMD...: retries CMD every 0.2 s for SECONDS of uptime
# (not a count of tries: each podvisor call is slow under emulation).
until_ok() {
  end=$(($(cut -d. -f1 /proc/uptime) + $1)); shift
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ] || return 1
    sleep 0.2
  done
}
# field POD KEY: the first value of KEY in the pod's JSON, unquoted.
field() { podvisor get pod "$1" -o json | sed -n "s/^ *\"$2\": //p" | head -1 | sed 's/,$//; s/^"//; s/"$//'; }
running() { podvisor get pod "$1" -o json | grep -q '"phase": "Running"'; }
pid_of() { # the pid whose command line is exactly "$*"
  for p in /proc/[0-9]*; do
    [ "$(tr '\0' ' ' 2>/dev/null < "$p/cmdline")" = "$* " ] && { basename "$p"; return; }
  done
}

# The node's hard memory.available threshold: 200 MiB below what is free
# before podvisor starts, so the hog (BestEffort) crosses it while the VM
# still has about 100 MiB left and the kernel's OOM killer stays out of it.
avail=$(awk '/^MemAvailable:/ {printf "%d", $2 * 1024}' /proc/meminfo)
threshold=$((avail - 200 * 1048576))
hogmb=300
mkdir -p /tmp/m /tmp/pv
cat > /tmp/pv.yaml <<CFG
cgroups: {driver: cgroupfs}
backoff: {initial: 1s, max: 8s}
node: {systemReserved: {memory: 10Mi}, podvisorReserved: {memory: 10Mi}}
eviction: {hard: {memory.available: "$threshold"}, monitorPeriod: 2s}
CFG
daemon() {
  podvisor run --config /tmp/pv.yaml --manifests /tmp/m --data-dir /tmp/pv >> /tmp/podvisor.log 2>&1 &
  pv=$!
}
t0=$(now)
daemon
until_ok 60 podvisor get pods || fail "the daemon's API did not answer: $(tail -20 /tmp/podvisor.log)"
echo "VM: time daemon start → API answers: $(ms "$t0" "$(now)") ms"

# A Guaranteed process pod with a memory limit.
t0=$(now)
cat > /tmp/m/web.yaml <<'POD'
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  runtimeClassName: process
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "echo started at $(cut -d' ' -f1 /proc/uptime); exec sleep 100000"]
    resources: {limits: {memory: 32Mi, cpu: 100m}}
POD
until_ok 60 running web || fail "web not Running: $(podvisor get pods 2>&1; tail -20 /tmp/podvisor.log)"
t1=$(now)
# Running comes with the start; the shell then logs and execs sleep.
until_ok 30 sh -c 'podvisor logs web | grep -q "^started at "' || fail "web's log: $(podvisor logs web 2>&1)"
started=$(podvisor logs web | sed -n 's/^started at //p')
echo "VM: time manifest → Running in the API: $(ms "$t0" "$t1") ms, → web's command ran: $(ms "$t0" "$started") ms"
web_execd() { [ -n "$(pid_of sleep 100000)" ]; }
until_ok 30 web_execd || fail "web's shell did not exec sleep: $(podvisor get pods 2>&1)"
web=$(pid_of sleep 100000)
cg=$(sed -n 's/^0:://p' "/proc/$web/cgroup" 2>/dev/null)
case $cg in /podvisor/*) pass "web's process $web runs in its cgroup $cg" ;; *) fail "web's process '$web' is in cgroup '$cg'" ;; esac
got=$(cat "/sys/fs/cgroup$cg/memory.max" 2>&1)
[ "$got" = 33554432 ] && pass "memory.max of web's cgroup is 32Mi" || fail "memory.max of web's cgroup $cg: $got"
got=$(cat "/sys/fs/cgroup$cg/cpu.max" 2>&1)
[ "$got" = "10000 100000" ] && pass "cpu.max of web's cgroup is 10000 100000" || fail "cpu.max of web's cgroup $cg: $got"
[ "$(field web qosClass)" = Guaranteed ] && pass "web is Guaranteed" || fail "web's qosClass: $(field web qosClass)"

# A crash loop: restarted at once, then after 1 s, 2 s, 4 s (backoff),
# and CrashLoopBackOff while it waits. Each start appends its uptime.
cat > /tmp/m/crasher.yaml <<'POD'
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  runtimeClassName: process
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "cut -d' ' -f1 /proc/uptime >> /tmp/crasher.starts; exit 3"]
POD
crashloop() { podvisor get pods | awk '$1 == "crasher" && /CrashLoopBackOff/ { found = 1 } END { exit !found }'; }
until_ok 60 crashloop && pass "crasher shows CrashLoopBackOff: $(podvisor get pods | awk '$1 == "crasher"')" ||
  fail "crasher not in CrashLoopBackOff: $(podvisor get pods 2>&1)"
until_ok 90 sh -c '[ "$(wc -l < /tmp/crasher.starts)" -ge 5 ]' || fail "crasher started $(wc -l < /tmp/crasher.starts 2>&1) times in 90 s, want 5"
restarts=$(field crasher restartCount)
[ "${restarts:-0}" -ge 4 ] && pass "crasher's restartCount grows: $restarts" || fail "crasher's restartCount: $restarts"
[ "$(field crasher exitCode)" = 3 ] && pass "crasher's last exit code is 3" || fail "crasher's exit code: $(field crasher exitCode)"
# Each start exits at once, so the gap between two starts is the delay
# from an exit to the next start: the backoff plus the restart's own cost.
gaps=$(awk 'NR > 1 && NR <= 5 { printf "%d ", ($1 - prev) * 1000 } { prev = $1 }' /tmp/crasher.starts)
set -- $gaps
echo "VM: time crasher's exit → next start: $gaps ms; beyond the backoff (0, 1, 2, 4 s): $1 $(($2 - 1000)) $(($3 - 2000)) $(($4 - 4000)) ms"
[ "$#" = 4 ] && [ "$2" -ge 1000 ] && [ "$3" -ge 2000 ] && [ "$4" -ge 4000 ] && pass "crasher's restarts back off: $gaps ms apart" ||
  fail "crasher's restarts do not back off 1 s, 2 s, 4 s: $gaps ms apart"
rm /tmp/m/crasher.yaml

# The daemon killed with SIGKILL and started again: web keeps its process.
kill -9 "$pv"; wait "$pv" 2>/dev/null
t0=$(now)
daemon
until_ok 60 running web || fail "web after the daemon's restart: $(podvisor get pods 2>&1; tail -20 /tmp/podvisor.log)"
echo "VM: time daemon restart → web Running again: $(ms "$t0" "$(now)") ms"
[ "$(pid_of sleep 100000)" = "$web" ] && [ "$(field web restartCount)" = 0 ] &&
  pass "after kill -9 of the daemon, web runs on as pid $web, adopted" ||
  fail "web after the daemon's restart: pid $(pid_of sleep 100000), was $web; restartCount $(field web restartCount)"

# A BestEffort memory hog pushes memory.available below the threshold: it
# is evicted, web (Guaranteed, within its requests) is not touched.
cat > /tmp/m/hog.yaml <<POD
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  runtimeClassName: process
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: host
    command: ["hog", "-mb", "$hogmb", "-step", "8", "-every", "20ms", "-threshold", "$threshold", "-log", "/tmp/hog.log"]
POD
evicted() { podvisor get pod hog -o json | grep -q '"reason": "Evicted"'; }
until_ok 120 evicted && pass "hog evicted: $(field hog message)" ||
  fail "hog not evicted (threshold $threshold bytes, $(grep MemAvailable /proc/meminfo)): $(podvisor get pod hog -o json 2>&1 | grep -E '"(phase|reason|message)"'; cat /tmp/hog.log 2>&1)"
[ "$(field hog phase)" = Failed ] && field hog message | grep -q memory && pass "hog is Failed, its message names memory" ||
  fail "hog: phase $(field hog phase), message $(field hog message)"
latency=$(awk '/^cross/ { c = $2 } /^term/ { t = $2 } END { if (c && t) printf "%d", (t - c) / 1e6 }' /tmp/hog.log 2>/dev/null)
echo "VM: time memory.available below the threshold → SIGTERM to the hog: ${latency:-?} ms"
running web && [ "$(pid_of sleep 100000)" = "$web" ] && pass "web untouched by the eviction" ||
  fail "web after the eviction: $(podvisor get pods 2>&1)"
echo "VM: node conditions: $(podvisor get node -o json | grep -A1 '"type": "MemoryPressure"' | tr -s ' \n' ' ')"
podvisor get pods
exit $status
