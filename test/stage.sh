#!/usr/bin/env bash
# Times one stage of `make test` and keeps the figure, so a CI log says where
# its minutes went:
#
#   test/stage.sh NAME COMMAND...   runs COMMAND, prints and records its wall time
#   test/stage.sh --summary         prints every recorded stage, slowest first
#   test/stage.sh --reset           forgets the recorded stages
#
# Stages that run concurrently (make -j) each record their own line; the
# summary also prints the wall time since --reset, which is what CI waits.
set -u
dir=${PODVISOR_STAGE_DIR:-bin/stages}
case "${1:-}" in
--reset)
  rm -rf "$dir" && mkdir -p "$dir" && date +%s > "$dir/.start"
  exit 0 ;;
--summary)
  [ -d "$dir" ] || exit 0
  now=$(date +%s) start=$(cat "$dir/.start" 2>/dev/null || date +%s)
  echo "stage times (wall seconds; concurrent stages overlap):"
  cat "$dir"/*.time 2>/dev/null | sort -t' ' -k2,2nr | awk '{printf "  %-22s %5d s  %s\n", $1, $2, $3}'
  echo "  total wall             $((now - start)) s (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
  exit 0 ;;
""|-*)
  echo "usage: test/stage.sh NAME COMMAND... | --summary | --reset" >&2
  exit 2 ;;
esac
name=$1
shift
mkdir -p "$dir"
start=$(date +%s)
"$@"
rc=$?
took=$(($(date +%s) - start))
result=ok
[ $rc -eq 0 ] || result="FAILED(exit-$rc)"
echo "$name $took $result" > "$dir/$name.time"
echo "stage $name: $took s, $result"
exit $rc
