package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const statefulSetYAML = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      runtimeClassName: process
      terminationGracePeriodSeconds: 1
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      containers:
      - name: main
        image: host
        command: ["sh", "-c", "exec sleep 1004"]
`

// A StatefulSet's pod never runs twice: its device's daemon killed (the
// keeper keeps the pod running), the pod is deleted at the hub after its
// 5 s toleration but made nowhere else; when the daemon comes back it
// stops the pod, confirms, and only then is db-0 made again, once.
func TestPodhubStatefulSetPodNeverRunsTwice(t *testing.T) {
	h := newPodhub(t)
	ids, daemons, _ := startFleet(t, h, 3)
	file := filepath.Join(t.TempDir(), "db.yaml")
	os.WriteFile(file, []byte(statefulSetYAML), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 || !strings.Contains(out, "1 statefulset(s)") {
		t.Fatalf("apply: %d %s", code, out)
	}
	placed := waitForValue(t, 60*time.Second, "db-0 Running",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool { return len(m["db"]) == 1 })
	lost := placed["db"][0]
	// The status is the pass's that follows the device's report.
	waitForLong(t, 10*time.Second, "get sts: db 1/1", func() bool {
		out, _ := h.cli("get", "sts")
		return strings.Contains(out, "db") && strings.Contains(out, "1/1")
	})
	// Its daemon is killed; the keeper keeps db-0 running.
	daemons[lost].stop(syscall.SIGKILL)
	waitForLong(t, 30*time.Second, "db-0 terminating at the hub", func() bool {
		_, all := hubPodsByApp(t, h)
		for _, p := range all {
			if p.Name == "db-0" && p.Spec.NodeName == lost && p.DeletionTimestamp != nil {
				return true
			}
		}
		return false
	})
	// Twenty seconds past the toleration, no other device has db-0.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, all := hubPodsByApp(t, h)
		for _, p := range all {
			if p.Name == "db-0" && p.Spec.NodeName != lost {
				t.Fatalf("db-0 made again on %s while %s may still run it", p.Spec.NodeName, lost)
			}
		}
		for _, id := range ids {
			if id == lost {
				continue
			}
			if out, _, _ := daemons[id].cli("get", "pods"); strings.Contains(out, "db-0") {
				t.Fatalf("db-0 on %s while %s still runs it:\n%s", id, lost, out)
			}
		}
		time.Sleep(time.Second)
	}
	// The daemon comes back: it stops db-0 (the hub no longer wants it
	// there), confirms, and db-0 is made again, once.
	daemons[lost].start()
	waitForValue(t, 60*time.Second, "db-0 Running once, nothing terminating",
		func() []string {
			m, all := hubPodsByApp(t, h)
			for _, p := range all {
				if p.DeletionTimestamp != nil {
					return append(m["db"], "terminating on "+p.Spec.NodeName)
				}
			}
			return m["db"]
		},
		func(on []string) bool { return len(on) == 1 && !strings.HasPrefix(on[0], "terminating") })
	running := 0
	for _, id := range ids {
		if out, _, _ := daemons[id].cli("get", "pods"); strings.Contains(out, "db-0") && strings.Contains(out, "Running") {
			running++
		}
	}
	if running != 1 {
		t.Errorf("db-0 Running on %d devices, want 1", running)
	}
}

// statefulSetV is a two-replica StatefulSet whose pods sleep for the
// given seconds (the template's revision), updated down to partition.
func statefulSetV(sleep, partition int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: kv}
spec:
  replicas: 2
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {partition: %d}
  selector:
    matchLabels: {app: kv}
  template:
    metadata:
      labels: {app: kv}
    spec:
      runtimeClassName: process
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: host
        command: ["sh", "-c", "exec sleep %d"]
`, partition, sleep)
}

// A StatefulSet's rollout through podhub: rollout status says kubectl's
// words, a partitioned update stops at the partition, and the pod below
// it — the last of the current revision — deleted comes back at that
// revision, made from its stored template; history lists both revisions.
func TestPodhubStatefulSetPartitionKeepsTheCurrentRevision(t *testing.T) {
	h := newPodhub(t)
	startFleet(t, h, 2)
	file := filepath.Join(t.TempDir(), "kv.yaml")
	apply := func(yaml string) {
		t.Helper()
		os.WriteFile(file, []byte(yaml), 0o644)
		if out, code := h.cli("apply", "-f", file); code != 0 {
			t.Fatalf("apply: %d %s", code, out)
		}
	}
	status := func(want string) {
		t.Helper()
		out, code := h.cli("rollout", "status", "statefulset/kv", "--timeout", "90s")
		if code != 0 || !strings.HasSuffix(out, want) {
			t.Fatalf("rollout status: %d\n%s\nwant it to end with %q", code, out, want)
		}
	}
	commandOf := func(name string) string {
		_, all := hubPodsByApp(t, h)
		for _, p := range all {
			if p.Name == name && p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning {
				return strings.Join(p.Spec.Containers[0].Command, " ")
			}
		}
		return ""
	}
	apply(statefulSetV(1011, 0))
	status("partitioned roll out complete: 2 new pods have been updated...\n")
	apply(statefulSetV(1012, 1))
	status("partitioned roll out complete: 1 new pods have been updated...\n")
	if got := commandOf("kv-1"); !strings.Contains(got, "sleep 1012") {
		t.Fatalf("kv-1 runs %q, want the update revision's sleep 1012", got)
	}
	if out, code := h.cli("delete", "pod", "kv-0"); code != 0 {
		t.Fatalf("delete pod kv-0: %s", out)
	}
	waitForValue(t, 60*time.Second, "kv-0 Running again", func() string { return commandOf("kv-0") },
		func(c string) bool { return c != "" })
	// Running again: the old instance may still be listed a moment; the
	// one made again is the current revision's.
	got := waitForValue(t, 30*time.Second, "kv-0 made again", func() string { return commandOf("kv-0") },
		func(c string) bool { return strings.Contains(c, "sleep 1011") || strings.Contains(c, "sleep 1012") })
	if !strings.Contains(got, "sleep 1011") {
		t.Fatalf("kv-0 made again running %q, want the current revision's sleep 1011", got)
	}
	out, code := h.cli("rollout", "history", "sts/kv")
	if code != 0 || !strings.Contains(out, "statefulset.apps/kv") || !strings.Contains(out, "\n1 ") || !strings.Contains(out, "\n2 ") {
		t.Errorf("rollout history: %d\n%s", code, out)
	}
	if out, code := h.cli("rollout", "pause", "sts/kv"); code == 0 || !strings.Contains(out, `statefulsets.apps "kv" pausing is not supported`) {
		t.Errorf("rollout pause: %d %s", code, out)
	}
}
