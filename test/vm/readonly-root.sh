#!/usr/bin/env bash
# podvisor on a read-only root: in private mount and PID namespaces, / is
# remounted read-only, /run is a fresh tmpfs (as on a device) and only the
# data dir is writable. The packaged config (with a cgroup root of the
# test's own and short backoffs) runs:
#   1. a process pod that keeps running and one that crashes and is
#      restarted, with no write refused anywhere (EROFS in the log fails);
#   2. ten idle process pods, while strace counts the daemon's writes to
#      its SQLite files (and fsyncs) over SECONDS, scaled to an hour.
#
#   test/vm/readonly-root.sh BIN_DIR [SECONDS]   (root; needs unshare;
#                                                  strace for step 2)
set -euo pipefail
bin=$(cd "$1" && pwd) seconds=${2:-120}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/podvisor-ro.XXXXXX)
cgroot=podvisor-ro-$$
cleanup() {
  for d in /sys/fs/cgroup/*/"$cgroot" /sys/fs/cgroup/"$cgroot"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/data" "$work/m1" "$work/m2"
sed "s/^  root: podvisor$/  root: $cgroot/" "$repo/packaging/config.yaml" > "$work/config.yaml"
grep -q "root: $cgroot" "$work/config.yaml" || { echo "FAIL: the packaged config has no cgroups.root to replace"; exit 1; }
printf 'backoff: {initial: 1s, max: 2s}\n' >> "$work/config.yaml"
pod() { # NAME COMMAND
  printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  runtimeClassName: process\n  containers:\n  - name: app\n    image: host\n    command: ["sh", "-c", "%s"]\n' "$1" "$2"
}
pod sleeper 'exec sleep 100000' > "$work/m1/sleeper.yaml"
pod crasher 'sleep 0.5; exit 3' > "$work/m1/crasher.yaml"
for i in $(seq 10); do pod "idle$i" 'exec sleep 100000' > "$work/m2/idle$i.yaml"; done

unshare --mount --pid --fork --kill-child -- bash -s "$bin" "$work" "$seconds" <<'INNER'
set -euo pipefail
bin=$1 work=$2 seconds=$3
status=0
fail() { echo "FAIL: $*"; status=1; }
mount --make-rprivate /
mount -t proc proc /proc
mount --bind "$work/data" "$work/data"
mount -t tmpfs -o mode=0755 tmpfs /run
mount -o remount,bind,ro /
for d in /tmp /var/tmp /etc /var/lib "$work"; do
  if touch "$d/.podvisor-rw-probe" 2>/dev/null; then rm -f "$d/.podvisor-rw-probe"; fail "$d is writable"; fi
done
touch "$work/data/.probe" && rm "$work/data/.probe" || fail "the data dir is not writable"
[ $status = 0 ] || exit 1
pv() { "$bin/podvisor" "$@"; }
json() { pv get pod "$1" -o json 2>/dev/null; }
wait_for() { # DESCRIPTION SECONDS COMMAND...
  local what=$1 n=$(($2 * 5)); shift 2
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "timed out waiting for $what"; return 1
}
daemon=
start() { # MANIFESTS DATA
  "$bin/podvisor" run --config "$work/config.yaml" --manifests "$1" --data-dir "$2" --stop-pods-on-exit \
    > /run/podvisor.log 2>&1 &
  daemon=$!
}
stop() { kill -TERM "$daemon"; wait "$daemon" || true; }

# 1. A pod runs and a crashing one restarts.
start "$work/m1" "$work/data/one"
wait_for "sleeper Running" 60 sh -c "'$bin/podvisor' get pods | grep -q '^sleeper .*Running'"
restarts() { json crasher | grep -o '"restartCount": *[0-9]*' | grep -o '[0-9]*$'; }
wait_for "crasher restarted twice" 60 sh -c "[ \"\$('$bin/podvisor' get pod crasher -o json | grep -o '\"restartCount\": *[0-9]*' | grep -o '[0-9]*\$')\" -ge 2 ]"
echo "read-only root: sleeper Running, crasher restarts $(restarts)"
# The write counter's control: a crash-looping pod's restarts are written.
dbwrites() { { grep -E '^[0-9]+ +(write|pwrite64|writev|pwritev)\([0-9]+<[^>]*/data/'"$1"'/[^>]*(\.db|-wal|-journal)>' /run/strace.log || true; } | wc -l; }
if command -v strace >/dev/null; then
  timeout 10 strace -f -y -qq -e trace=write,pwrite64,writev,pwritev -p "$daemon" -o /run/strace.log || true
  control=$(dbwrites one)
  echo "while a pod crash-loops (restart every 1-2 s): $control writes to the SQLite files in 10 s"
  [ "$control" -gt 0 ] || fail "strace saw no SQLite write while a pod crash-looped: the counter below would be blind"
fi
stop
if grep -i 'read-only file system' /run/podvisor.log; then fail "a write was refused (above)"; fi

# 2. Ten idle pods: the daemon's writes to its SQLite files.
start "$work/m2" "$work/data/two"
wait_for "ten idle pods Running" 120 sh -c "[ \$('$bin/podvisor' get pods | grep -c '^idle.*Running') = 10 ]"
sleep 15 # past the start's writes
if command -v strace >/dev/null; then
  io0=$(awk '/^(syscw|wchar|write_bytes)/{printf "%s%s ", $1, $2}' /proc/$daemon/io)
  timeout "$seconds" strace -f -y -qq -e trace=write,pwrite64,writev,pwritev,fsync,fdatasync -p "$daemon" -o /run/strace.log || true
  io1=$(awk '/^(syscw|wchar|write_bytes)/{printf "%s%s ", $1, $2}' /proc/$daemon/io)
  db=$(dbwrites two)
  syncs=$(grep -cE '^[0-9]+ +f(data)?sync\(' /run/strace.log || true)
  bytes=$(grep -E '^[0-9]+ +(write|pwrite64)\([0-9]+<[^>]*/data/two/' /run/strace.log | grep -oE '= [0-9]+$' | awk '{s+=$2} END {print s+0}' || true)
  all=$(grep -cE '^[0-9]+ +(write|pwrite64|writev|pwritev)\(' /run/strace.log || true)
  echo "idle, 10 pods, ${seconds}s: $db writes to the SQLite files ($bytes bytes), $syncs fsyncs, $all writes in all"
  echo "per hour: $((db * 3600 / seconds)) SQLite writes, $((bytes * 3600 / seconds)) bytes, $((syncs * 3600 / seconds)) fsyncs"
  echo "the daemon's /proc/PID/io before: $io0 after: $io1"
  echo "what it wrote to (count, fd):"
  { grep -oE '\([0-9]+<[^>]*>' /run/strace.log || true; } | sort | uniq -c | sort -rn | head -5
else
  echo "strace missing: no write count"
fi
pv get pods | grep -c 'Running' >/dev/null
stop
if grep -i 'read-only file system' /run/podvisor.log; then fail "a write was refused (above)"; fi
exit $status
INNER
echo "ok: podvisor runs on a read-only root with only its data dir writable"
