package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/simfleet"
)

// The ConfigMap benchmark's knobs (make bench-objects).
var (
	objectsOnly    = flag.Bool("objects-only", false, "measure only ConfigMap distribution: a changed ConfigMap applied at podhub until every pod of a real device (-objects-pods) and every simulated device (-objects-devices) has it")
	objectsDevices = flag.Int("objects-devices", 1000, "simulated devices taking the ConfigMap (0: skip)")
	objectsPods    = flag.Int("objects-pods", 50, "pods of the real device mounting the ConfigMap (0: skip the real device)")
	objectsChanges = flag.Int("objects-changes", 10, "changes of the ConfigMap timed")
	objectsRuntime = flag.String("objects-runtime", "process", "the real device's pods: process (host commands) or containerd (busybox)")
)

// The benchmark's objects: a ConfigMap changed at every round (its
// version key says which round), and an immutable one the same pods use,
// which must never be sent again.
const (
	objectsCM    = "objbench"
	objectsFixed = "objbench-fixed"
)

// objectsConf is a config file of about 1 KiB, the ConfigMap's payload
// beside its version key.
var objectsConf = strings.Repeat("option = a value of some length, as config files have\n", 20)

// configMapYAML is the changing ConfigMap at a version.
func configMapYAML(version string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata:\n  version: %q\n  app.conf: %q\n",
		objectsCM, version, objectsConf)
}

// fixedYAML is the immutable ConfigMap.
func fixedYAML() string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\nimmutable: true\ndata:\n  ca.pem: %q\n",
		objectsFixed, strings.Repeat("MIIBkTCB+wIJAKHBfpegPjMCMA0GCSqGSIb3DQEBBQUAMBExDzANBgNVBAMMBnVu\n", 12))
}

// podhubApply runs podhub apply -f with content (as an operator does).
func podhubApply(podhub, data, dir, name, content string, extra ...string) error {
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		return err
	}
	args := append([]string{"--data-dir", data, "apply", "-f", file}, extra...)
	if out, err := exec.Command(podhub, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("podhub apply -f %s: %v %s", name, err, out)
	}
	return nil
}

// objectsBench runs the ConfigMap benchmark: the real device, then the
// simulated fleet, each with a podhub of its own.
func objectsBench(bin string) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	fmt.Printf("ConfigMap distribution — %s, %d CPUs, Linux %s, %s\n", cpuModel(), runtime.NumCPU(), kernel(), time.Now().UTC().Format(time.RFC3339))
	if *objectsPods > 0 {
		if err := objectsRealBench(abs, *objectsPods, *objectsChanges); err != nil {
			return err
		}
	}
	if *objectsDevices > 0 {
		if err := objectsFleetBench(abs, *objectsDevices, *objectsChanges); err != nil {
			return err
		}
	}
	fmt.Println("\n  peer (stated, not measured): the kubelet projects a changed ConfigMap into a mounted volume after up to its sync period")
	fmt.Println("  plus its cache's propagation delay (syncFrequency, default 1 m; with the default Watch strategy the watch's delay):")
	fmt.Println("  \"as long as the kubelet sync period + cache propagation delay\" (kubernetes.io/docs/concepts/configuration/configmap,")
	fmt.Println("  Mounted ConfigMaps are updated automatically), up to about a minute.")
	return nil
}

// versionWait tracks, for one round, when each member first had the
// ConfigMap at the round's version.
type versionWait struct {
	mu    sync.Mutex
	want  string
	start time.Time
	at    map[string]time.Duration
	need  int
	all   chan struct{}
}

func (w *versionWait) reset(want string, need int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want, w.need, w.at, w.all, w.start = want, need, map[string]time.Duration{}, make(chan struct{}), time.Now()
}

// begin starts the round's clock (just before podhub apply).
func (w *versionWait) begin() {
	w.mu.Lock()
	w.start = time.Now()
	w.mu.Unlock()
}

// saw notes that member id has version now.
func (w *versionWait) saw(id, version string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if version != w.want || w.at == nil {
		return
	}
	if _, ok := w.at[id]; ok {
		return
	}
	w.at[id] = time.Since(w.start)
	if len(w.at) == w.need {
		close(w.all)
	}
}

func (w *versionWait) wait(timeout time.Duration, what string) ([]time.Duration, error) {
	w.mu.Lock()
	all := w.all
	w.mu.Unlock()
	select {
	case <-all:
	case <-time.After(timeout):
		w.mu.Lock()
		defer w.mu.Unlock()
		return nil, fmt.Errorf("%s: only %d of %d have version %s after %v", what, len(w.at), w.need, w.want, timeout)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Duration, 0, len(w.at))
	for _, d := range w.at {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// dist is p50/p95/max of durations, in ms.
func dist(d []time.Duration) string {
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	return fmt.Sprintf("p50 %7.1f ms  p95 %7.1f ms  max %7.1f ms", ms(pct(d, 50)), ms(pct(d, 95)), ms(pct(d, 100)))
}

// objectsFleetBench enrols n simulated devices, applies a pod using both
// ConfigMaps to all of them, and times each change of the ConfigMap
// until every device has opened its new version, with the bytes each
// device received for it.
func objectsFleetBench(bin string, n, changes int) error {
	ph, tmp, podhub, done, err := fleetHub(bin, "podvisor-objbench-fleet")
	if err != nil {
		return err
	}
	defer done()
	enrolled, err := simfleet.LoadEnrolment(ph.data, ph.addr)
	if err != nil {
		return err
	}
	w := &versionWait{}
	var fixedOpened atomic.Int64
	opened := func(id string, e protocol.ObjectEntry, data map[string][]byte) {
		switch e.Name {
		case objectsCM:
			w.saw(id, string(data["version"]))
		case objectsFixed:
			fixedOpened.Add(1)
		}
	}
	sims := make([]*simfleet.ObjectDevice, n)
	for i := range n {
		id := fmt.Sprintf("obj-%05d", i)
		if err := ph.client.Do("PUT", "/v1/devices/"+id+"/labels", map[string]string{"bench": "objects"}, nil); err != nil {
			return err
		}
		creds, err := enrolled.Issue(id)
		if err != nil {
			return err
		}
		if sims[i], err = creds.ObjectDevice(simfleet.ObjectConfig{Heartbeat: *hubHeartbeat, Opened: opened}); err != nil {
			return err
		}
	}
	// Connected 16 at a time (not timed).
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, s := range sims {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs <- s.Start()
		}()
	}
	wg.Wait()
	close(errs)
	defer func() { // each says goodbye and waits for its disconnect: all at once
		var stopped sync.WaitGroup
		for _, s := range sims {
			stopped.Add(1)
			go func() { defer stopped.Done(); s.Stop() }()
		}
		stopped.Wait()
	}()
	for err := range errs {
		if err != nil {
			return err
		}
	}
	if err := waitReady(ph, n); err != nil {
		return err
	}
	fmt.Printf("\nConfigMap to %d simulated devices (own MQTT clients, HPKE keys of their own, every message opened), podhub's embedded broker\n", n)
	fmt.Printf("  load average before: %s\n", loadAverage())

	// The first version and the immutable one, then the pod on every
	// device: each device takes both.
	w.reset("v0", n)
	if err := podhubApply(podhub, ph.data, tmp, "fixed.yaml", fixedYAML()); err != nil {
		return err
	}
	if err := podhubApply(podhub, ph.data, tmp, "cm.yaml", configMapYAML("v0")); err != nil {
		return err
	}
	w.begin()
	if err := podhubApply(podhub, ph.data, tmp, "pod.yaml", objectsPodYAML("app", "busybox", "", "/cfg", "objbench"), "--selector", "bench=objects"); err != nil {
		return err
	}
	first, err := w.wait(5*time.Minute, "the pod's objects to every device")
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); fixedOpened.Load() < int64(n); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d devices opened the immutable ConfigMap in 1 min", fixedOpened.Load(), n)
		}
	}
	fmt.Printf("  pod applied -> both ConfigMaps opened on every device     %8.2f s  (per device %s)\n", pct(first, 100).Seconds(), dist(first))
	time.Sleep(time.Second)
	snapshot := func() []deviceBytes {
		out := make([]deviceBytes, n)
		for i, s := range sims {
			out[i] = deviceBytes{s.IndexBytes.Load(), s.ObjectBytes.Load(), s.ObjectBytesOf("ConfigMap/default/" + objectsFixed),
				s.Indexes.Load(), s.Objects.Load(), s.Requests.Load()}
		}
		return out
	}
	fill := snapshot()
	fmt.Printf("  first fill, bytes per device: index %s, objects %s (the immutable one %s)\n",
		spread(fill, func(b deviceBytes) int64 { return b.index }), spread(fill, func(b deviceBytes) int64 { return b.objects }),
		spread(fill, func(b deviceBytes) int64 { return b.fixed }))

	fmt.Printf("    object requests per device: %s (more than 1: a request the hub dropped, asked again after the device's backoff of 10 s)\n",
		spread(fill, func(b deviceBytes) int64 { return b.requests }))
	var alls, perDevice []time.Duration
	var requests []deviceBytes
	var hubCPU float64
	var last []deviceBytes
	before := fill
	for k := 1; k <= changes; k++ {
		version := fmt.Sprintf("v%d", k)
		w.reset(version, n)
		cpu0, _ := cpuTicks(ph.pid())
		w.begin()
		if err := podhubApply(podhub, ph.data, tmp, "cm.yaml", configMapYAML(version)); err != nil {
			return err
		}
		got, err := w.wait(2*time.Minute, "change "+version)
		if err != nil {
			return err
		}
		cpu1, _ := cpuTicks(ph.pid())
		hubCPU += float64(cpu1-cpu0) / clockTicks
		alls = append(alls, got[len(got)-1])
		perDevice = append(perDevice, got...)
		time.Sleep(time.Second) // anything more the change brings arrives
		after := snapshot()
		last = diffBytes(after, before)
		requests = append(requests, last...)
		before = after
	}
	mem := rss(ph.pid())
	peak := procMiB(fmt.Sprintf("/proc/%d/status", ph.pid()))["VmHWM:"]
	fmt.Printf("  podhub apply of a changed ConfigMap -> every device opened it (n=%d changes)\n", changes)
	fmt.Printf("    the last device of each change   %s\n", dist(alls))
	fmt.Printf("    every device, every change       %s\n", dist(perDevice))
	fmt.Printf("  bytes per device for one change (the last): index %s in %s message(s), objects %s in %s message(s); the immutable one %s\n",
		spread(last, func(b deviceBytes) int64 { return b.index }), spread(last, func(b deviceBytes) int64 { return b.indexes }),
		spread(last, func(b deviceBytes) int64 { return b.objects }), spread(last, func(b deviceBytes) int64 { return b.objectMsgs }),
		spread(last, func(b deviceBytes) int64 { return b.fixed }))
	fmt.Printf("  object requests per device and change: %s; devices that asked more than once: %d of %d (the hub dropped their first request)\n",
		spread(requests, func(b deviceBytes) int64 { return b.requests }), countOver(requests, 1), len(requests))
	fmt.Printf("  podhub CPU per change %.2f s (%d devices' indexes signed, stored, published; %d objects sealed)\n", hubCPU/float64(changes), n, n)
	fmt.Printf("  podhub RSS after / peak %.1f / %.1f MiB\n", mem.total, peak)
	fmt.Printf("  load average after: %s\n", loadAverage())
	for _, s := range sims {
		if r := s.Refused.Load(); r > 0 {
			return fmt.Errorf("%s refused %d object messages", s.ID, r)
		}
	}
	return nil
}

// deviceBytes is what one device received so far.
type deviceBytes struct {
	index, objects, fixed         int64
	indexes, objectMsgs, requests int64
}

func diffBytes(a, b []deviceBytes) []deviceBytes {
	out := make([]deviceBytes, len(a))
	for i := range a {
		out[i] = deviceBytes{a[i].index - b[i].index, a[i].objects - b[i].objects, a[i].fixed - b[i].fixed,
			a[i].indexes - b[i].indexes, a[i].objectMsgs - b[i].objectMsgs, a[i].requests - b[i].requests}
	}
	return out
}

// countOver counts the entries that asked more than n times.
func countOver(bs []deviceBytes, n int64) int {
	c := 0
	for _, b := range bs {
		if b.requests > n {
			c++
		}
	}
	return c
}

// spread is one field's value over the devices: "N" when all agree,
// else "min..max".
func spread(bs []deviceBytes, f func(deviceBytes) int64) string {
	lo, hi := f(bs[0]), f(bs[0])
	for _, b := range bs {
		lo, hi = min(lo, f(b)), max(hi, f(b))
	}
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// objectsPodYAML is a pod mounting the changing ConfigMap at mountPath
// and the immutable one beside it (mountPath + "-fixed"); runtimeClass
// "" is the image's runtime. Its container's command carries tag as $0,
// so the bench finds its process.
func objectsPodYAML(name, image, runtimeClass, mountPath, tag string) string {
	rc, pull := "", "    imagePullPolicy: Never\n"
	if runtimeClass != "" {
		rc, pull = "  runtimeClassName: "+runtimeClass+"\n", ""
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
%s  terminationGracePeriodSeconds: 1
  volumes:
  - {name: cfg, configMap: {name: %s}}
  - {name: fixed, configMap: {name: %s}}
  containers:
  - name: main
    image: %s
%s    command: ["sh", "-c", "while :; do sleep 3600; done", %q]
    volumeMounts:
    - {name: cfg, mountPath: %s, readOnly: true}
    - {name: fixed, mountPath: %s-fixed, readOnly: true}
`, name, rc, objectsCM, objectsFixed, image, pull, tag, mountPath, mountPath)
}
