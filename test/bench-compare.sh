#!/bin/bash
# make bench-compare BASE=<commit>: the rows a reshaping must not regress,
# measured for BASE and for this tree in one run, side by side, so the
# machine's drift between sessions does not pass for a change. Each side
# runs its own benchmark code against its own binaries, alternating
# (base, head, base, head) so that a change in the machine's load falls
# on both.
#   rows: manifest write → running, exit → restart (process pods), daemon
#   RSS at 0 and 50 pods, podvisor's arm64 size, hub status updates per
#   second (embedded broker), podhub's memory per idle device (3,000
#   simulated devices, 1,000 of them taking an apply) and apply → acked.
set -euo pipefail
base=${1:?usage: test/bench-compare.sh BASE-COMMIT}
head=$(pwd)
work=$(mktemp -d /tmp/podvisor-bench-compare.XXXXXX)
cleanup() {
  git -C "$head" worktree remove --force "$work/base" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$head" worktree add --detach "$work/base" "$base" >/dev/null
basecommit=$(git -C "$work/base" rev-parse --short HEAD)
headcommit="$(git -C "$head" rev-parse --short HEAD)$(git -C "$head" diff --quiet HEAD -- . ':!bin' || echo +changes)"

arm64size() { # the shipped arm64 podvisor of a tree (make arm64-bins), in bytes
  (cd "$1" && GOARCH=arm64 CGO_ENABLED=0 go build -trimpath $(packaging/buildflags.sh podvisor) -ldflags "-s -w" -o "$work/$2.arm64" ./cmd/podvisor)
  stat -c %s "$work/$2.arm64"
}

for side in base head; do
  dir=$head; [ $side = base ] && dir=$work/base
  (cd "$dir" && make -s build >/dev/null)
done
declare -A out
for round in daemon hub; do
  for side in base head; do
    dir=$head; [ $side = base ] && dir=$work/base
    echo "== $round rows, $side ($(uptime | sed 's/.*load/load/'))" >&2
    case $round in
      daemon) args=(-n 20 -probed 0 -evictions 0 -containerd-pods 0 -hub-devices -1 -listen-samples 0 -listen-idle 0) ;;
      hub) args=(-hub-only -hub-devices 3000 -hub-apply-devices 1000) ;;
    esac
    # Each side's whole output goes to stderr as it runs; a side that
    # fails shows its rows as not measured and the other side still runs.
    (cd "$dir" && go run ./test/bench -bin bin/podvisor "${args[@]}" >"$work/$round.$side.log" 2>&1) ||
      echo "bench-compare: the $side side's $round rows failed" >>"$work/$round.$side.log"
    cat "$work/$round.$side.log" >&2
    out[$round.$side]=$(cat "$work/$round.$side.log")
  done
done

row() { # row LABEL REGEX: the first matching line's numbers, base then head
  local b h
  b=$(grep -m1 -E "$2" <<<"${out[daemon.base]}${out[hub.base]}" | sed -E 's/^[^0-9]*(-> [a-z ]*)?//; s/ +/ /g' | cut -c1-70 || true)
  h=$(grep -m1 -E "$2" <<<"${out[daemon.head]}${out[hub.head]}" | sed -E 's/^[^0-9]*(-> [a-z ]*)?//; s/ +/ /g' | cut -c1-70 || true)
  printf '| %s | %s | %s |\n' "$1" "${b:-not measured}" "${h:-not measured}"
}
echo
echo "bench-compare on $(uname -n), $(nproc) CPUs, $(date -u +%FT%TZ)"
echo "| row | base $basecommit | head $headcommit |"
echo "|---|---|---|"
row "manifest write → running, ms (p50 p90 max)" '^manifest write -> workload running'
row "process exit → restarted, ms (p50 p90 max)" '^process exit -> restarted workload running'
row "the sh restart loop (floor), ms" 'peer: sh while-loop restart'
row "daemon RSS, 0 pods" '^daemon RSS, 0 pods'
row "daemon RSS, 50 pods" '^daemon RSS, 50 pods'
row "status updates device → hub, embedded broker" '^status updates device -> hub, stored, embedded'
row "podhub RSS with idle devices" 'podhub RSS with [0-9]+ idle devices'
row "podhub apply → every ack stored" 'podhub apply -> every'
printf '| %s | %s | %s |\n' "podvisor arm64, stripped (bytes)" "$(arm64size "$work/base" base)" "$(arm64size "$head" head)"
