#!/bin/sh
# Runs inside the containerd VM (test/vm/containerd.sh): containerd and
# podvisor on cgroup v2, a containerd pod with limits, exec and OOMKilled.
. "$(dirname "$0")/check-lib.sh" # ok, until_ok
status=0
fail() { echo "VM: FAIL $*"; status=1; }
cat > /tmp/containerd.toml <<CFG
version = 2
root = "/tmp/ctd/root"
state = "/run/ctd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/ctd/c.sock"
CFG
containerd --config /tmp/containerd.toml > /tmp/containerd.log 2>&1 &
mkdir -p /tmp/m /tmp/pv/images
cp /image.tar /tmp/pv/images/busybox.tar
cat > /tmp/pv.yaml <<CFG
# overlay is a module, and a busybox initramfs loads none: copy snapshots.
containerd: {address: /run/ctd/c.sock, sandboxDir: /run/sandbox, snapshotter: native}
CFG
podvisor run --config /tmp/pv.yaml --manifests /tmp/m --data-dir /tmp/pv > /tmp/podvisor.log 2>&1 &
until_ok 120 sh -c 'podvisor images | grep -q podvisor.test/busybox' || fail "image not side-loaded: $(tail -5 /tmp/podvisor.log)"
cat > /tmp/m/web.yaml <<POD
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  hostNetwork: true
  containers:
  - name: app
    image: podvisor.test/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "echo started; exec sleep 100000"]
    resources: {limits: {memory: 32Mi, cpu: 100m}}
POD
# 64Mi, not less: runc 1.1's init copies its own binary (~10 MiB) into a
# memfd while runc create moves it into the container's cgroup; at 16Mi
# that copy was charged there now and then and runc init was OOM-killed
# before the start ("cannot start a stopped process", a StartError).
cat > /tmp/m/hog.yaml <<POD
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - {name: app, image: podvisor.test/busybox:1, imagePullPolicy: Never, command: ["tail", "/dev/zero"], resources: {limits: {memory: 64Mi}}}
POD
running() { podvisor get pod "$1" -o json | grep -q '"ready": true'; }
until_ok 120 running web || fail "web not Running: $(podvisor get pods 2>&1; tail -20 /tmp/podvisor.log)"
podvisor get pods
id=$(podvisor get pod web -o json | sed -n 's|^ *"containerID": "containerd://\(.*\)",$|\1|p' | head -1)
uid=$(podvisor get pod web -o json | sed -n 's/^ *"uid": "\(.*\)",$/\1/p' | head -1)
# Limits only: requests default to them, so the pod is Guaranteed.
cg=/sys/fs/cgroup/podvisor/pod$uid/$id
got=$(cat "$cg/memory.max" 2>&1); [ "$got" = 33554432 ] && ok "memory.max of the container's cgroup is 32Mi" || fail "memory.max at $cg: $got"
got=$(cat "$cg/cpu.max" 2>&1); [ "$got" = "10000 100000" ] && ok "cpu.max is 10000 100000" || fail "cpu.max at $cg: $got"
pid=$(head -1 "$cg/cgroup.procs" 2>/dev/null)
[ -n "$pid" ] && [ "$(sed -n 's/^0:://p' /proc/$pid/cgroup)" = "/podvisor/pod$uid/$id" ] && ok "the container's process runs in its cgroup" || fail "no process in $cg"
out=$(podvisor exec web -- sh -c 'cat /proc/self/cgroup; hostname' 2>&1)
echo "$out" | grep -q "^0::/" && ok "exec runs in the container: $(echo "$out" | tr '\n' ' ')" || fail "exec: $out"
podvisor logs web | grep -q started && ok "logs" || fail "logs: $(podvisor logs web 2>&1)"
until_ok 60 sh -c 'podvisor get pod hog -o json | grep -q "\"reason\": \"OOMKilled\""' && ok "hog ended OOMKilled" || fail "hog: $(podvisor get pod hog -o json 2>&1 | grep -A3 terminated)"
exit $status
