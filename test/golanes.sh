#!/usr/bin/env bash
# The go-test stage of `make test` in two lanes, two test processes at a
# time as before, but with the e2e package (about 16 minutes of tests run
# one at a time) split in two:
#
#   lane fleet: e2e's fleet tests (FLEET below), then ./test/conformance
#   lane node:  e2e's other tests, then every other package given, one at a time
#
#   test/golanes.sh PKG...
#
# The fleet tests (podhub, a broker, self-update, simulated devices) act on
# no node-wide state; the node tests that do (memory pressure, PSI, the
# cgroup root, iptables, eBPF on the cgroup2 root) stay in one process,
# one at a time, as does conformance. Each lane's output is printed whole
# when it ends; the exit status is the worse of the two.
set -u
cd "$(dirname "$0")/.."

# Files whose tests form the fleet lane; a new test elsewhere runs in the
# node lane.
FLEET="podhub*_test.go hub*_test.go selfupdate_test.go stssafety_test.go rolloutchaos_test.go
  nats_test.go mosquitto_test.go dashboard_test.go kubectl_test.go fencing_test.go"
fleet=$(cd test/e2e && sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' $FLEET | paste -sd'|')
if [ -z "$fleet" ]; then
  echo "golanes: no fleet tests found in test/e2e ($FLEET)" >&2
  exit 2
fi
re="^(${fleet})\$"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gotest() { go test -count=1 -timeout 20m "$@"; }
lane() { # name command...
  local name=$1 start=$SECONDS rc
  shift
  "$@" > "$out/$name" 2>&1
  rc=$?
  { echo "--- lane $name: $((SECONDS - start)) s, exit $rc"; cat "$out/$name"; } > "$out/$name.done"
  flock "$out" cat "$out/$name.done" # one lane's output at a time
  return $rc
}
fleetLane() { gotest -run "$re" ./test/e2e; a=$?; gotest ./test/conformance; b=$?; return $((a | b)); }
nodeLane() { gotest -skip "$re" ./test/e2e; a=$?; gotest -p 1 "$@"; b=$?; return $((a | b)); }

lane fleet fleetLane & fleetPid=$!
lane node nodeLane "$@" & nodePid=$!
wait $fleetPid; a=$?
wait $nodePid; b=$?
exit $((a | b))
