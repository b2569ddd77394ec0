package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// safetyWorkloads is a DaemonSet (its argument set by version) on every
// device and a 3-replica StatefulSet named name, with the pod template's
// extra lines (two-space indented under template:), whose pods leave an
// unreachable device after toleration seconds. Every pod carries
// watchEnv.
func safetyWorkloads(version int, name string, grace, toleration int, templateExtra, command string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      runtimeClassName: process
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: host
        command: ["sleep", "%d"]
        env: [{name: %[3]s, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: %[2]s}
spec:
  replicas: 3
  serviceName: %[2]s
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata:
      labels: {app: %[2]s}
%[4]s    spec:
      runtimeClassName: process
      terminationGracePeriodSeconds: %[5]d
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: %[6]d}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: %[6]d}
      containers:
      - name: main
        image: host
        command: %[7]s
        env: [{name: %[3]s, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
`, 2000+version, name, watchEnv, templateExtra, grace, toleration, command)
}

func applyText(t *testing.T, h *podhubServer, text string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "workloads.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := h.cli("apply", "-f", file); code != 0 {
		t.Fatalf("apply: %s", out)
	}
}

// hubPod is where the hub shows pods named name: device -> terminating
// (a lost device's pod stays listed, as it last reported it, next to
// its replacement).
func hubPod(t *testing.T, h *podhubServer, name string) map[string]bool {
	_, all := hubPodsByApp(t, h)
	on := map[string]bool{}
	for _, p := range all {
		if p.Name == name {
			on[p.Spec.NodeName] = p.DeletionTimestamp != nil
		}
	}
	return on
}

// hubPodOn is the one device the hub shows pod name on ("" unless one).
func hubPodOn(t *testing.T, h *podhubServer, name string) string {
	on := hubPod(t, h, name)
	for dev := range on {
		if len(on) == 1 {
			return dev
		}
	}
	return ""
}

// logHubOnFailure shows, if the test fails, the hub's devices, pods and
// the StatefulSet as they are at the end.
func logHubOnFailure(t *testing.T, h *podhubServer, sts string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, args := range [][]string{{"get", "devices"}, {"get", "pods", "-A", "-o", "wide"}, {"describe", "statefulset", sts}, {"describe", "daemonset", "agent"}} {
			out, _ := h.cli(args...)
			t.Logf("podhub %s:\n%s", strings.Join(args, " "), out)
		}
	})
}

// waitFleetSettled waits for the DaemonSet on every device and the
// StatefulSet's 3 pods ready, each live once on the devices.
func waitFleetSettled(t *testing.T, h *podhubServer, w *identityWatch, sts string, devices int) {
	t.Helper()
	waitForLong(t, 90*time.Second, fmt.Sprintf("agent available on %d devices and %s 3/3 ready, each pod live once", devices, sts), func() bool {
		ds, ok := daemonSetStatus(h, "agent")
		if !ok || ds.NumberAvailable != int32(devices) || statefulSetReady(h, sts) != 3 {
			return false
		}
		for i := range 3 {
			if len(w.live(fmt.Sprintf("%s-%d", sts, i), "")) != 1 {
				return false
			}
		}
		return true
	})
}

// A StatefulSet's pod on a device whose daemon is killed (its pods run
// on under the keeper) is not made again elsewhere; podhub fence device
// moves it at once; the DaemonSet is updated meanwhile, and a bare pod
// for the fenced device refused. When the daemon returns it stops the
// fenced pods, and nothing starts on it until they are gone; the fence
// lifted, it runs the DaemonSet's new pod. Throughout, no pod runs on two
// devices at once, as the devices' processes show (the fenced device's
// old copies aside once it is fenced: the operator declared them dead,
// the test knows they are not).
func TestStatefulSetPodFencedOnSixDevices(t *testing.T) {
	requireRoot(t)
	// db's pods ignore SIGTERM: a stop runs its whole grace period.
	const toleration, dbGrace = 2, 5 * time.Second
	dbCommand := `["sh", "-c", "trap '' TERM; exec sleep 3011"]`
	h := newPodhub(t, "--device-timeout", "8s")
	_, daemons, _ := startFleet(t, h, 6, "  heartbeat: 2s\n")
	w := watchIdentities(t, daemons)
	logHubOnFailure(t, h, "db")
	applyText(t, h, safetyWorkloads(1, "db", int(dbGrace.Seconds()), toleration, "", dbCommand))
	waitFleetSettled(t, h, w, "db", 6)

	victim := hubPodOn(t, h, "db-1")
	old := w.live("db-1", victim)
	if victim == "" || len(old) != 1 {
		t.Fatalf("db-1 at the hub on %q, live there %v", victim, old)
	}
	cutAt := time.Now()
	daemons[victim].stop(syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond)
	if len(w.live("db-1", victim)) != 1 {
		t.Fatal("db-1 died with its daemon: the keeper should run it on")
	}
	waitForLong(t, 30*time.Second, "db-1 terminating at the hub (device lost, toleration past)", func() bool {
		on := hubPod(t, h, "db-1")
		return len(on) == 1 && on[victim]
	})
	t.Logf("db-1 terminating at the hub %v after the daemon was killed", time.Since(cutAt).Round(100*time.Millisecond))
	// Pod safety: terminating is not gone. Ten seconds on, db-1 is made
	// nowhere else.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if on := hubPod(t, h, "db-1"); len(on) != 1 {
			t.Fatalf("db-1 made again while %s may still run it: %v", victim, on)
		}
		if live := w.live("db-1", ""); len(live) != 1 || live[0].device != victim {
			t.Fatalf("db-1 live on the devices: %+v, want once on %s", live, victim)
		}
	}

	out, code := h.cli("fence", "device", victim)
	if code != 0 || !strings.Contains(out, "device/"+victim+" fenced") {
		t.Fatalf("podhub fence device: %d %s", code, out)
	}
	w.exemptDevice(victim)
	fencedAt := time.Now()
	out, _ = h.cli("get", "devices")
	if st := deviceStatus(out, victim); !strings.HasSuffix(st, ",Fenced") {
		t.Fatalf("get devices shows %s as %q, want ...,Fenced:\n%s", victim, st, out)
	}
	if out, _ := h.cli("describe", "device", victim); !strings.Contains(out, "Fenced:") {
		t.Errorf("describe device does not show the fence:\n%s", out)
	}
	waitForLong(t, 30*time.Second, "db-1 made again on another device and live there", func() bool {
		for dev, terminating := range hubPod(t, h, "db-1") {
			if dev != victim && !terminating && len(w.live("db-1", dev)) == 1 {
				return true
			}
		}
		return false
	})
	t.Logf("db-1 replaced %v after the fence", time.Since(fencedAt).Round(100*time.Millisecond))
	fencedCopies := w.live("", victim) // db-1 and the agent's pod
	if len(fencedCopies) != 2 {
		t.Fatalf("live on the fenced device %s: %+v, want db-1 and its agent (nothing could stop them)", victim, fencedCopies)
	}
	if out, code := h.cli("fence", "device", victim, "--remove"); code == 0 || !strings.Contains(out, "cannot lift the fence") {
		t.Fatalf("unfence before the device read its fence: %d %s", code, out)
	}

	// Something new for the fleet before the device returns: the
	// DaemonSet's next template rolls over the 5 others, none for the
	// fenced device; a bare pod for it is refused.
	applyText(t, h, safetyWorkloads(2, "db", int(dbGrace.Seconds()), toleration, "", dbCommand))
	waitForLong(t, 60*time.Second, "the agent's new template available on the 5 unfenced devices", func() bool {
		ds, ok := daemonSetStatus(h, "agent")
		return ok && ds.DesiredNumberScheduled == 5 && ds.UpdatedNumberScheduled == 5 && ds.NumberAvailable == 5
	})
	bare := filepath.Join(t.TempDir(), "bare.yaml")
	os.WriteFile(bare, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: bare}\nspec:\n  runtimeClassName: process\n  containers: [{name: main, image: host, command: [sleep, \"3012\"]}]\n"), 0o644)
	if out, code := h.cli("apply", "-f", bare, "--device", victim); code == 0 || !strings.Contains(out, "fenced") {
		t.Errorf("apply --device to the fenced device: %d %s", code, out)
	}

	if live := w.live("", victim); len(live) != 2 {
		t.Fatalf("live on the fenced device %s before its daemon returns: %+v, want db-1 and its agent", victim, live)
	}
	returned := time.Now()
	daemons[victim].start()
	t.Logf("%s's daemon serves its API %v after its start", victim, time.Since(returned).Round(10*time.Millisecond))
	// The operator lifts the fence as soon as the hub lets them: only once
	// the device has applied it and reports none of the pods it names.
	waitForLong(t, 40*time.Second, "the fence lifted (refused until the device has applied it and reports none of its pods)", func() bool {
		_, code := h.cli("fence", "device", victim, "--remove")
		return code == 0
	})
	lifted := time.Now()
	var gone time.Time
	for _, sp := range w.copies("", victim) {
		if sp.last.After(gone) {
			gone = sp.last
		}
		if sp.start.After(returned) {
			t.Errorf("%s started on the fenced device after its daemon returned, before the fence was lifted: %v", sp.pod, sp)
		}
	}
	if live := w.live("", victim); len(live) > 0 || gone.After(lifted) {
		t.Fatalf("the fence was lifted at %s while the fenced device still ran %v (last seen %s)", lifted.Format("15:04:05.000"), live, gone.Format("15:04:05.000"))
	}
	t.Logf("the fenced pods stopped %v after the daemon's start (grace %v, SIGTERM ignored); the fence lifted %v after",
		gone.Sub(returned).Round(10*time.Millisecond), dbGrace, lifted.Sub(gone).Round(10*time.Millisecond))
	// Both were stopped for the fence, and the hub hears why.
	waitForLong(t, 30*time.Second, "the device's Fenced events for db-1 and its agent at the hub", func() bool {
		out, _ := h.cli("describe", "device", victim)
		n := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "Fenced") && strings.Contains(line, "the hub fenced this device") &&
				(strings.Contains(line, "default/db-1") || strings.Contains(line, "default/agent-")) {
				n++
			}
		}
		return n == 2
	})

	// The device a node again: the DaemonSet's new pod runs there, only
	// now.
	waitForLong(t, 60*time.Second, "the agent's new template available on all 6 devices", func() bool {
		ds, ok := daemonSetStatus(h, "agent")
		return ok && ds.UpdatedNumberScheduled == 6 && ds.NumberAvailable == 6 && len(w.live("", victim)) == 1
	})
	if fresh := w.live("", victim)[0]; !fresh.start.After(gone) {
		t.Errorf("%s started on %s at %s, before its fenced pods were gone (%s)", fresh.pod, victim,
			fresh.start.Format("15:04:05.000"), gone.Format("15:04:05.000"))
	}
	if live := w.live("db-1", ""); len(live) != 1 || live[0].device == victim {
		t.Errorf("db-1 live: %+v, want once, not on %s", live, victim)
	}
	w.check()
}

// A self-fencing lease on a StatefulSet's pods, over 6 devices each
// behind a link the test can cut: the pod on a cut device stops there
// once its lease and grace period have run out (it ignores SIGTERM, so
// the grace period runs whole), and its replacement starts on another
// device only after that, the hub having waited (lease + grace) × 1.02
// of silence; the link restored, the device does not run it again (the
// hub placed it elsewhere). No pod runs on two devices at once.
func TestStatefulSetLeaseOnSixDevices(t *testing.T) {
	requireRoot(t)
	const lease, grace, heartbeat = 10 * time.Second, 3 * time.Second, 2 * time.Second
	h := newPodhub(t, "--device-timeout", "8s")
	relays := map[string]*tcpCut{}
	_, daemons, _ := startFleetVia(t, h, 6, func(id string) string {
		relays[id] = newTCPCut(t, h.addr)
		return relays[id].addr
	}, "  heartbeat: 2s\n")
	w := watchIdentities(t, daemons)
	logHubOnFailure(t, h, "store")
	// The hub may replace the pod from (lease + grace) × 1.02 after it
	// last heard the device: the toleration (1 s) and the device timeout
	// (8 s) end before that, so the lease is what the hub waits for.
	annotations := "      annotations: {fencing.podvisor.io/lease-seconds: \"10\"}\n"
	applyText(t, h, safetyWorkloads(1, "store", int(grace.Seconds()), 1, annotations, `["sh", "-c", "trap '' TERM; exec sleep 3013"]`))
	waitFleetSettled(t, h, w, "store", 6)
	time.Sleep(2 * heartbeat) // a few renewals

	victim := hubPodOn(t, h, "store-1")
	if victim == "" || len(w.live("store-1", victim)) != 1 {
		t.Fatalf("store-1 at the hub on %q, live there %+v", victim, w.live("store-1", ""))
	}
	cut := time.Now()
	relays[victim].cut()
	waitForLong(t, lease+grace+5*time.Second, "store-1 stopped on the cut device", func() bool { return len(w.live("store-1", victim)) == 0 })
	// The copy died between its last sample alive and the sample that
	// found it gone (before the wait returned).
	seenGone := time.Now()
	stopped := w.copies("store-1", victim)[0].last
	t.Logf("store-1 stopped on %s %v after the cut (last seen alive; seen gone %v after it; lease %v, grace %v)",
		victim, stopped.Sub(cut).Round(100*time.Millisecond), seenGone.Sub(cut).Round(100*time.Millisecond), lease, grace)
	// The lease renews at the send time of the newest heartbeat the hub
	// answered (uplink's leaseLink; here every 2 s, the base period, under
	// lease/4): the newest sent before the cut may have lost its receipt
	// to the cut, so the renewal is at most two heartbeats before it
	// (receipts within a period). The pod ignores SIGTERM: it runs the
	// lease and the whole grace period from the renewal, never less —
	// the design's bound, exact, checked on when it was seen gone (never
	// before it died). The upper bound is liveness only (the daemon's
	// timer, the SIGKILL, the reaping, the /proc sampling on a loaded
	// machine), checked on when it was last seen alive.
	if low := lease + grace - 2*heartbeat; seenGone.Sub(cut) < low {
		t.Errorf("store-1 seen gone %v after the cut, before it could have run its lease and grace from a renewal (at least %v)", seenGone.Sub(cut), low)
	}
	if high := lease + grace + 3*time.Second; stopped.Sub(cut) > high {
		t.Errorf("store-1 last seen alive %v after the cut, later than its lease and grace and 3 s of slack (%v)", stopped.Sub(cut), high)
	}

	var repl seenProc
	waitForLong(t, 40*time.Second, "store-1 made again and live on another device", func() bool {
		for _, sp := range w.live("store-1", "") {
			if sp.device != victim {
				repl = sp
				return true
			}
		}
		return false
	})
	t.Logf("store-1's replacement started on %s %v after the cut, %v after the cut device's copy stopped",
		repl.device, repl.start.Sub(cut).Round(100*time.Millisecond), repl.start.Sub(stopped).Round(100*time.Millisecond))
	if !repl.start.After(stopped) {
		t.Errorf("the replacement started at %s, before the cut device's copy was last seen alive at %s",
			repl.start.Format("15:04:05.000"), stopped.Format("15:04:05.000"))
	}
	// The hub counts from when it last heard the device: at most a
	// heartbeat before the cut.
	wait := lease + grace + (lease+grace)/50
	if low := wait - heartbeat; repl.start.Sub(cut) < low {
		t.Errorf("the replacement started %v after the cut, want at least (lease + grace) × 1.02 − a heartbeat = %v", repl.start.Sub(cut), low)
	}

	out, _, _ := daemons[victim].cli("get", "pod", "store-1", "-o", "json")
	var p v1.Pod
	json.Unmarshal([]byte(out), &p)
	var target *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			target = &p.Status.Conditions[i]
		}
	}
	if target == nil || target.Reason != v1.PodReasonTerminationByKubelet || !strings.Contains(target.Message, "lease") || p.Status.Phase != v1.PodFailed {
		t.Errorf("store-1 on the cut device: phase %s conditions %+v, want Failed with DisruptionTarget TerminationByKubelet", p.Status.Phase, p.Status.Conditions)
	}
	if out, _, _ := daemons[victim].cli("describe", "pod", "store-1"); !strings.Contains(out, "LeaseExpired") {
		t.Errorf("describe pod store-1 lacks the LeaseExpired event:\n%s", out)
	}

	relays[victim].restore()
	waitForLong(t, 60*time.Second, "the cut device, back, drops store-1 (the hub placed it elsewhere)", func() bool {
		out, _, _ := daemons[victim].cli("get", "pods")
		return !strings.Contains(out, "store-1")
	})
	if live := w.live("store-1", ""); len(live) != 1 || live[0].device != repl.device {
		t.Errorf("store-1 live: %+v, want once, on %s", live, repl.device)
	}
	w.check()
}
