package e2e

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/simfleet"
)

// simDevices is a fleet of simulated devices in this process: real
// uplink agents, each with its own store, whose pods become Ready a
// second after they start.
type simDevices struct {
	t        *testing.T
	enrolled simfleet.Enrolment
	// log keeps the agents' warnings, shown when the test fails.
	logged  *lockedBuffer
	log     *slog.Logger
	devices map[string]*simDevice
}

type simDevice struct {
	id    string
	creds simfleet.Device
	st    *store.Store
	pods  *simfleet.ReadyDevice
	stop  chan struct{}
	done  chan struct{}
	agent *uplink.Agent
}

// startSimDevices labels n devices sim-000.. (label kind=sim) and runs
// their agents until the test ends.
func startSimDevices(t *testing.T, h *podhubServer, n int) *simDevices {
	t.Helper()
	for i := range n {
		if out, code := h.cli("label", "device", simID(i), "kind=sim"); code != 0 {
			t.Fatalf("label %s: %s", simID(i), out)
		}
	}
	enrolled, err := simfleet.LoadEnrolment(h.dataDir, h.addr)
	if err != nil {
		t.Fatal(err)
	}
	logged := &lockedBuffer{}
	s := &simDevices{t: t, enrolled: enrolled, devices: map[string]*simDevice{}, logged: logged,
		log: slog.New(slog.NewTextHandler(logged, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
			t.Logf("the simulated devices' warnings (last 40 of %d):\n%s", len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	dir := t.TempDir()
	for i := range n {
		id := simID(i)
		st, err := store.Open(filepath.Join(dir, id, "state.db"), store.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		creds, err := enrolled.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		d := &simDevice{id: id, creds: creds, st: st, pods: &simfleet.ReadyDevice{ID: id, ReadyAfter: time.Second}}
		s.devices[id] = d
		if err := s.run(d); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range s.devices {
			s.halt(d)
			d.pods.Stop()
			d.st.Close()
		}
	})
	return s
}

func simID(i int) string { return fmt.Sprintf("sim-%03d", i) }

// run starts a device's agent (again).
func (s *simDevices) run(d *simDevice) error {
	a, err := d.creds.Agent(d.st, d.pods, 2*time.Second, s.log)
	if err != nil {
		return err
	}
	d.pods.Attach(a)
	d.agent, d.stop, d.done = a, make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) { defer close(done); a.Run(stop) }(d.stop, d.done)
	return nil
}

// halt stops a device's agent: the device keeps its pods but is cut off.
func (s *simDevices) halt(d *simDevice) {
	if d.stop == nil {
		return
	}
	close(d.stop)
	<-d.done
	d.stop = nil
}

// A rolling update under fire: a DaemonSet rolled from one template to
// the next over 200 simulated devices and 6 real podvisor daemons while
// podhub and devices are killed at random moments (the seed is logged).
// The rollout finishes; in the hub's view it never takes more devices
// down than maxUnavailable, beyond those the chaos itself disturbed; and
// a StatefulSet's identities on the real devices never run twice, as the
// devices' own processes show.
func TestRolloutChaos(t *testing.T) {
	requireRoot(t)
	if testing.Short() && !prereq.CI() {
		t.Skip("long (about a minute): skipped under -short, never in CI")
	}
	// Devices heartbeat every 2 s and are lost after 8 s of silence, so
	// a daemon killed for long is lost within the test.
	h := newPodhub(t, "--device-timeout", "8s")
	ids, daemons, _ := startFleet(t, h, 6, "  heartbeat: 2s\n")
	for _, id := range ids {
		if out, code := h.cli("label", "device", id, "kind=real"); code != 0 {
			t.Fatalf("label %s: %s", id, out)
		}
	}
	sims := startSimDevices(t, h, 200)
	total := len(ids) + 200
	budget := (total*10 + 99) / 100 // maxUnavailable 10%, rounded up as the DaemonSet controller does
	waitForLong(t, 90*time.Second, fmt.Sprintf("%d devices Ready at the hub", total), func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Count(out, " Ready ") >= total
	})

	applyText(t, h, chaosWorkloads(1))
	waitForLong(t, 3*time.Minute, "the first template available on every device and the StatefulSet ready", func() bool {
		ds, ok := daemonSetStatus(h, "agent")
		sts := statefulSetReady(h, "db")
		return ok && ds.NumberAvailable == int32(total) && ds.UpdatedNumberScheduled == int32(total) && sts == 3
	})

	// Times are logged from here: the watchers and the chaos start, and
	// the second template is applied at once.
	applied := time.Now()
	// The devices' own truth: every live process of a StatefulSet pod,
	// by identity and device, from /proc.
	identities := watchIdentities(t, daemons)

	// The chaos: podhub killed and restarted, a real daemon killed (its
	// pods keep running) and restarted, simulated devices cut off and
	// back. disturbed records when each device was last touched.
	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var dmu sync.Mutex
	disturbed := map[string]time.Time{}
	touch := func(id string) { dmu.Lock(); disturbed[id] = time.Now(); dmu.Unlock() }
	act := func(format string, args ...any) {
		t.Logf("%6.1fs chaos: %s", time.Since(applied).Seconds(), fmt.Sprintf(format, args...))
	}
	var hubDown sync.Mutex
	stopChaos := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(1000+rng.IntN(3000)) * time.Millisecond):
			}
			switch rng.IntN(4) {
			case 0:
				act("podhub killed")
				hubDown.Lock()
				h.cmd.Process.Kill()
				h.cmd.Wait()
				time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
				if err := h.tryStart(); err != nil {
					t.Errorf("podhub after a kill: %v", err)
				}
				hubDown.Unlock()
				act("podhub back")
			case 1, 2:
				// A real daemon killed (its pods keep running), briefly
				// or past the hub's timeout and the pods' tolerations.
				id := ids[rng.IntN(len(ids))]
				d := daemons[id]
				touch(id)
				d.cmd.Process.Kill()
				d.cmd.Wait()
				off := time.Duration(200+rng.IntN(2000)) * time.Millisecond
				if rng.IntN(2) == 0 {
					off = time.Duration(12+rng.IntN(8)) * time.Second
				}
				act("%s's daemon killed for %s", id, off)
				time.Sleep(off)
				if err := d.tryStart(40 * time.Second); err != nil {
					t.Errorf("%s after a kill: %v", id, err)
				}
				touch(id)
				act("%s's daemon back", id)
			case 3:
				var cut []*simDevice
				for range 5 {
					d := sims.devices[simID(rng.IntN(200))]
					if d.stop != nil {
						touch(d.id)
						sims.halt(d)
						cut = append(cut, d)
					}
				}
				act("%d simulated devices cut off", len(cut))
				time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
				for _, d := range cut {
					if err := sims.run(d); err != nil {
						t.Errorf("%s: %v", d.id, err)
					}
					touch(d.id)
				}
			}
		}
	})

	applyText(t, h, chaosWorkloads(2))
	start := time.Now()
	worst, worstAt := 0, time.Duration(0)
	done := false
	for deadline := start.Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		hubDown.Lock()
		pods, devices, described, ok := hubView(h)
		ds, dsOK := daemonSetStatus(h, "agent")
		hubDown.Unlock()
		if !ok || !dsOK {
			continue
		}
		// Devices the hub sees Ready, not disturbed in the last 30 s,
		// without an available pod of the DaemonSet: the rollout's doing.
		dmu.Lock()
		down := 0
		var which []string
		for id := range devices {
			if at, ok := disturbed[id]; ok && time.Since(at) < 30*time.Second {
				continue
			}
			if !pods[id] {
				down++
				which = append(which, id+": "+strings.Join(described[id], ", "))
			}
		}
		dmu.Unlock()
		if down > worst {
			worst, worstAt = down, time.Since(start)
		}
		if down > budget {
			slices.Sort(which)
			t.Errorf("%s after the apply the hub sees %d undisturbed Ready devices without an available pod, over maxUnavailable %d:\n%s",
				time.Since(start).Round(time.Second), down, budget, strings.Join(which, "\n"))
		}
		if ds.UpdatedNumberScheduled == int32(total) && ds.NumberAvailable == int32(total) {
			done = true
			break
		}
		if halted := daemonSetHalt(ds); halted != "" {
			t.Logf("the rollout halted: %s", halted)
			done = true
			break
		}
	}
	close(stopChaos)
	chaos.Wait()
	t.Logf("most undisturbed devices down at once: %d (at %s; budget %d)", worst, worstAt.Round(time.Second), budget)
	if !done {
		ds, _ := daemonSetStatus(h, "agent")
		t.Fatalf("the rollout neither finished nor halted in 5 min: %+v", ds)
	}
	identities.check()
	if len(identities.procs) < 3 {
		t.Errorf("the watch saw %d StatefulSet processes, want at least the 3 replicas'", len(identities.procs))
	}

}

// chaosWorkloads is the DaemonSet at a version (only its argument
// changes) and a 3-replica StatefulSet on the real devices.
func chaosWorkloads(version int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: "10%%"}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      runtimeClassName: process
      terminationGracePeriodSeconds: 1
      containers:
      - {name: main, image: host, command: ["sleep", "%d"]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      runtimeClassName: process
      terminationGracePeriodSeconds: 1
      nodeSelector: {kind: real}
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers:
      - name: main
        image: host
        command: ["sleep", "3011"]
        env: [{name: SAFETY_POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
`, 2000+version)
}

// hubView is what the hub shows: for each Ready device, whether its
// DaemonSet pod is available (Ready, not terminating), and its DaemonSet
// pods in words.
func hubView(h *podhubServer) (available map[string]bool, ready map[string]bool, pods map[string][]string, ok bool) {
	out, code := h.cli("get", "devices")
	if code != 0 {
		return nil, nil, nil, false
	}
	ready = map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "Ready" {
			ready[f[0]] = true
		}
	}
	raw, code := h.cli("get", "pods", "-A", "-o", "json")
	if code != 0 {
		return nil, nil, nil, false
	}
	var list v1.PodList
	if json.Unmarshal([]byte(raw), &list) != nil {
		return nil, nil, nil, false
	}
	available, pods = map[string]bool{}, map[string][]string{}
	for _, p := range list.Items {
		if p.Labels["app"] != "agent" {
			continue
		}
		desc := fmt.Sprintf("%s %s rev %s", p.Name, p.Status.Phase, p.Labels["controller-revision-hash"])
		for _, c := range p.Status.Conditions {
			desc += fmt.Sprintf(" %s=%s", c.Type, c.Status)
		}
		if p.DeletionTimestamp != nil {
			desc += fmt.Sprintf(" deleted %s (%s)", p.DeletionTimestamp.Format("15:04:05"), p.Status.Reason)
		}
		pods[p.Spec.NodeName] = append(pods[p.Spec.NodeName], desc)
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				available[p.Spec.NodeName] = true
			}
		}
	}
	return available, ready, pods, true
}

// workloadItems lists a kind's objects as podhub get KIND -o json prints
// them (a List, or a bare array).
func workloadItems(h *podhubServer, kind string) ([]json.RawMessage, bool) {
	out, code := h.cli("get", kind, "-o", "json")
	if code != 0 {
		return nil, false
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if json.Unmarshal([]byte(out), &list) == nil && list.Items != nil {
		return list.Items, true
	}
	var items []json.RawMessage
	return items, json.Unmarshal([]byte(out), &items) == nil
}

// daemonSetStatus is a DaemonSet's status, once its controller has
// observed its newest generation.
func daemonSetStatus(h *podhubServer, name string) (appsv1.DaemonSetStatus, bool) {
	items, _ := workloadItems(h, "daemonsets")
	for _, raw := range items {
		var ds appsv1.DaemonSet
		if json.Unmarshal(raw, &ds) == nil && ds.Name == name {
			return ds.Status, ds.Status.ObservedGeneration == ds.Generation
		}
	}
	return appsv1.DaemonSetStatus{}, false
}

// daemonSetHalt is the reason a halted rollout gives, from its conditions.
func daemonSetHalt(s appsv1.DaemonSetStatus) string {
	for _, c := range s.Conditions {
		if c.Status == v1.ConditionFalse && c.Reason != "" {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

func statefulSetReady(h *podhubServer, name string) int32 {
	items, _ := workloadItems(h, "statefulsets")
	for _, raw := range items {
		var s appsv1.StatefulSet
		if json.Unmarshal(raw, &s) == nil && s.Name == name {
			return s.Status.ReadyReplicas
		}
	}
	return -1
}
