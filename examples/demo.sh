#!/bin/sh
# Runs podvisor in the foreground on a throwaway data directory with the
# example manifests. Ctrl-C stops the daemon and, for the demo, its pods.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/podvisor-demo.XXXXXX)
mkdir -p "$tmp/manifests"
cp "$here"/examples/manifests/*.yaml "$tmp/manifests/"
sock="$tmp/podvisor.sock"
pv="$here/bin/podvisor"
cat <<MSG

  podvisor demo
  manifests: $tmp/manifests   (edit, add or remove files: pods follow)
  data dir:  $tmp/data
  socket:    $sock

  In another terminal:
    $pv get pods --socket $sock
    $pv describe pod crasher --socket $sock
    $pv logs web -f --socket $sock
    $pv get pod job -o yaml --socket $sock

  Ctrl-C stops the demo.

MSG
exec "$pv" run --manifests "$tmp/manifests" --data-dir "$tmp/data" --socket "$sock" --stop-pods-on-exit
