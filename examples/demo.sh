#!/bin/sh
# Runs a hub and a device on a throwaway directory: podhub with its
# embedded MQTT broker (TLS, client certificates from its own CA), the
# device enrolled with podhub device add, and podvisor with the example
# manifests and the issued credentials, connected to it. The hub then
# sends the device one more pod. Ctrl-C stops both (and, for the demo,
# the pods).
set -eu
# podvisor refuses manifests that group or others could write: with a
# umask of 002 (common for users with a group of their own) the copies
# below would be group-writable and refused.
umask 022
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/podvisor-demo.XXXXXX)
mkdir -p "$tmp/manifests"
cp "$here"/examples/manifests/*.yaml "$tmp/manifests/"
sock="$tmp/podvisor.sock"
pv="$here/bin/podvisor"
ph="$here/bin/podhub --data-dir $tmp/hub"
mqtt=${PODVISOR_DEMO_MQTT:-127.0.0.1:18830}
# The dashboard, /metrics and the Kubernetes API (HTTPS, login required).
https=${PODVISOR_DEMO_HTTPS:-127.0.0.1:18843}

$ph init >/dev/null
# The device's certificate, key, the CA and hub.pub, with the podvisor
# config that uses them (hub: url, deviceId, key, tls).
$ph device add demo --out "$tmp/demo-credentials" --install-dir "$tmp/demo-credentials" --url "mqtts://$mqtt" >/dev/null
$ph serve --mqtt-listen "$mqtt" --http-listen "$https" >"$tmp/podhub.log" 2>&1 &
hub=$!
# The device lets the hub run host commands (process pods), never as root.
{ cat "$tmp/demo-credentials/podvisor.yaml"; printf '  allowProcessPods: true\n'; } >"$tmp/podvisor.yaml"
"$pv" run --manifests "$tmp/manifests" --data-dir "$tmp/data" --socket "$sock" --stop-pods-on-exit \
  --config "$tmp/podvisor.yaml" --metrics-listen "unix:$tmp/metrics.sock" >"$tmp/podvisor.log" 2>&1 &
dev=$!
stop() {
  # The pause below is an async command of a non-interactive shell: it
  # ignores Ctrl-C's SIGINT and would outlive the demo.
  if [ -n "${pause:-}" ]; then kill "$pause" 2>/dev/null || true; fi
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
# greeter runs as nobody (65534); a demo run by a user runs it as that
# user, who cannot switch to another.
if [ "$(id -u)" -eq 0 ]; then
  cp "$here/examples/hub/greeter.yaml" "$tmp/greeter.yaml"
else
  sed '/runAsUser/d' "$here/examples/hub/greeter.yaml" >"$tmp/greeter.yaml"
fi
$ph apply -f "$tmp/greeter.yaml" --device demo
# A login for the dashboard and kubectl: a token, and a kubeconfig with it.
token=$($ph token create demo --kubeconfig "$tmp/demo.kubeconfig" --server "https://$https" | head -1)
sleep 2
cat <<MSG

  podvisor demo: one hub, one device
  device:  manifests $tmp/manifests (edit, add or remove files: pods follow)
           credentials $tmp/demo-credentials (from podhub device add demo)
           $pv get pods --socket $sock
  hub:     $here/bin/podhub --data-dir $tmp/hub get devices
           $here/bin/podhub --data-dir $tmp/hub get pods -A
           $here/bin/podhub --data-dir $tmp/hub describe device demo
           $here/bin/podhub --data-dir $tmp/hub logs greeter --device demo -f
           curl -s --unix-socket $tmp/metrics.sock http://podvisor/metrics
  browser: https://$https/ui/  (podhub's own CA: $tmp/hub/pki/ca.pem; log in with the token
           $token)
  kubectl: kubectl --kubeconfig $tmp/demo.kubeconfig get nodes,pods -A -o wide
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
while :; do sleep 3600 & pause=$!; wait "$pause" || true; done
