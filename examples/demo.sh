#!/bin/sh
# Runs a hub and a device on a throwaway directory: podhub with its
# embedded MQTT broker, and podvisor with the example manifests, connected
# to it. The hub then sends the device one more pod. Ctrl-C stops both
# (and, for the demo, the pods).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/podvisor-demo.XXXXXX)
mkdir -p "$tmp/manifests"
cp "$here"/examples/manifests/*.yaml "$tmp/manifests/"
sock="$tmp/podvisor.sock"
pv="$here/bin/podvisor"
ph="$here/bin/podhub --data-dir $tmp/hub"
mqtt=${PODVISOR_DEMO_MQTT:-127.0.0.1:18830}

$ph init >/dev/null
$ph serve --mqtt-listen "$mqtt" >"$tmp/podhub.log" 2>&1 &
hub=$!
# Enrol the demo device (labelling adds it): the hub believes only devices it knows.
for _ in $(seq 100); do $ph get devices >/dev/null 2>&1 && break; sleep 0.1; done
$ph label device demo role=demo >/dev/null
"$pv" run --manifests "$tmp/manifests" --data-dir "$tmp/data" --socket "$sock" --stop-pods-on-exit \
  --hub "mqtt://$mqtt" --device-id demo --hub-key "$tmp/hub/hub.pub" >"$tmp/podvisor.log" 2>&1 &
dev=$!
stop() {
  kill -TERM "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  kill -TERM "$hub" 2>/dev/null || true
  wait "$hub" 2>/dev/null || true
  echo "demo stopped; logs and state are in $tmp"
}
trap 'stop; exit 0' INT TERM

i=0
until $ph get devices 2>/dev/null | grep -q ' Ready'; do
  i=$((i + 1))
  if [ $i -gt 100 ] || ! kill -0 "$dev" 2>/dev/null || ! kill -0 "$hub" 2>/dev/null; then
    echo "demo: the device did not reach the hub; logs:"; tail -5 "$tmp/podhub.log" "$tmp/podvisor.log"; stop; exit 1
  fi
  sleep 0.1
done
$ph apply -f "$here/examples/hub/greeter.yaml" --device demo
sleep 2
cat <<MSG

  podvisor demo: one hub, one device
  device:  manifests $tmp/manifests (edit, add or remove files: pods follow)
           $pv get pods --socket $sock
  hub:     $here/bin/podhub --data-dir $tmp/hub get devices
           $here/bin/podhub --data-dir $tmp/hub get pods -A
           $here/bin/podhub --data-dir $tmp/hub describe device demo
  logs:    $tmp/podvisor.log, $tmp/podhub.log

\$ podhub get devices
MSG
$ph get devices
echo
echo '$ podhub get pods -A'
$ph get pods -A
echo
echo '$ podvisor get pods'
"$pv" get pods --socket "$sock"
echo
echo "Ctrl-C stops the demo."
while :; do sleep 3600 & wait $! || true; done
