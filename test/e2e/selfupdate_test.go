package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// podvisor updates itself end to end (issue 26, Checks): a real podhub,
// one real podvisor daemon enrolled to it and run as systemd would run it
// (the packaged binary, restarted when it exits), process pods from its
// manifests and from the hub. The hub rolls out a new version: the daemon
// downloads it, switches and executes it in place, and commits it; every
// container keeps its process, and a new pod goes to the new version's
// keeper. A broken version rolls back by the
// launcher's boot counting alone, and the hub halts with the device's
// reason. A release signed with another key and a downgrade are refused,
// the running version untouched. A power cut (SIGKILL) mid-download and
// right at the switch ends on a complete version, the pods untouched.
func TestSelfUpdateEndToEnd(t *testing.T) {
	began := time.Now()
	// The hub sends artifacts at 2 MiB/s (updates.chunkRate), so that a
	// download lasts long enough to be cut.
	r := newSURig(t, "gw-su", "2Mi", "30s")
	h, d, loop, dev := r.h, r.d, r.loop, r.dev
	mark := time.Now()
	timings := []string{fmt.Sprintf("builds, hub and device (v0.26.1) up %v", mark.Sub(began).Round(100*time.Millisecond))}
	lap := func(what string) {
		timings = append(timings, fmt.Sprintf("%s %v", what, time.Since(mark).Round(100*time.Millisecond)))
		t.Logf("--- %s: %v", what, time.Since(mark).Round(time.Millisecond))
		mark = time.Now()
	}
	pods := suPods(d.dir)
	d.write("file-ready.yaml", pods["file-ready"])
	d.write("file-inited.yaml", pods["file-inited"])
	r.applyHubPod("hub-web", pods["hub-web"])
	r.applyHubPod("hub-worker", pods["hub-worker"])
	before := map[string]containerRun{}
	for name := range pods {
		before[name] = runOf(t, d, d.waitPod(name, 30*time.Second, podReady))
		r.podPids = append(r.podPids, before[name].pid)
	}
	checkPods := func(when string) {
		t.Helper()
		checkSelfUpdatePods(t, d, when, before)
	}
	checkPods("before any update")
	lap("4 pods running (2 from files, 2 from the hub)")

	// 1. v0.26.2: downloaded, switched, executed in place, committed.
	pid := loop.pid()
	r.release("v0.26.2", "v0.26.2")
	u := r.awaitUpdate("v0.26.2", 2*time.Minute)
	if u.Status.Phase != "Complete" || u.Status.Done != 1 {
		t.Fatalf("update podvisor-v0.26.2: %+v", u.Status)
	}
	hd := getDevice(t, h, dev)
	if hd.Version != "v0.26.2" || hd.Update == nil || hd.Update.Phase != protocol.UpdateCommitted || hd.Update.Version != "v0.26.2" || hd.Update.Running != "v0.26.2" {
		t.Fatalf("the hub's view of the device after v0.26.2: %v", hd)
	}
	if out := mustCLI(t, h, "get", "devices"); !strings.Contains(out, "Committed v0.26.2") {
		t.Fatalf("podhub get devices after v0.26.2:\n%s", out)
	}
	if out, _, _ := d.cli("version"); !strings.Contains(out, "daemon   v0.26.2 ") {
		t.Fatalf("podvisor version after v0.26.2:\n%s", out)
	}
	// The device shows its own update's end on its node.
	if out, _, _ := d.cli("get", "node"); !strings.Contains(out, "Update: agent v0.26.2: Committed") {
		t.Fatalf("podvisor get node after v0.26.2, want its Update line:\n%s", out)
	}
	slot, rec := currentSlot(t, d.data)
	if rec.Version != "v0.26.2" || rec.State != "committed" {
		t.Fatalf("current slot %s after v0.26.2: %+v", slot, rec)
	}
	verifySlot(t, slot, rec)
	// Executed in place: the process systemd started is the one that runs
	// v0.26.2 (its main PID and notify socket stay).
	if now := loop.pid(); now != pid || loop.restarts() != 0 || exeOf(pid) != filepath.Join(slot, "podvisor") {
		t.Fatalf("the daemon after v0.26.2: pid %d (was %d), %d restarts, runs %s, want %s", now, pid, loop.restarts(), exeOf(now), filepath.Join(slot, "podvisor"))
	}
	checkPods("after v0.26.2")
	// A pod started now runs under v0.26.2's keeper, from its slot; those
	// before stay with v0.26.1's, drained (compat_test.go has the rest).
	pods["late"] = processPod("late", "Always", 2, fmt.Sprintf("echo $$$$ > %s; exec sleep %d", filepath.Join(d.dir, "late.pid"), suSleep+len(pods)+1))
	d.write("late.yaml", pods["late"])
	before["late"] = runOf(t, d, d.waitPod("late", 30*time.Second, podReady))
	r.podPids = append(r.podPids, before["late"].pid)
	if keeper := exeOf(parentOf(before["late"].pid)); keeper != filepath.Join(slot, "podvisor-shim") {
		t.Fatalf("a pod started after the update runs under %s, want v0.26.2's keeper %s", keeper, filepath.Join(slot, "podvisor-shim"))
	}
	if keeper := exeOf(parentOf(before["file-ready"].pid)); keeper != filepath.Join(filepath.Dir(d.bin), "podvisor-shim") {
		t.Fatalf("a pod of v0.26.1 runs under %s after the update, want v0.26.1's keeper", keeper)
	}
	r.checkNoZombie("after v0.26.2")
	lap("v0.26.2 pushed, updated, committed")

	// 2. A broken v0.26.3 (it exits at start): started twice by the
	// launcher's count, then rolled back to v0.26.2 by the launcher; the
	// loop only restarted it. The hub halts the update with the reason.
	restarts := loop.restarts()
	r.release("v0.26.3", "v0.26.3")
	u = r.awaitUpdate("v0.26.3", 2*time.Minute)
	if u.Status.Phase != "Halted" || u.Status.Failed != 1 || !strings.Contains(u.Status.Reason, "v0.26.3 started 2 times without becoming ready") ||
		!strings.Contains(u.Status.Reason, "podvisor_testbroken") {
		t.Fatalf("update podvisor-v0.26.3: %+v", u.Status)
	}
	hd = getDevice(t, h, dev)
	if hd.Update == nil || hd.Update.Phase != protocol.UpdateRolledBack || hd.Update.Version != "v0.26.3" || !strings.Contains(hd.Update.Reason, "v0.26.3") {
		t.Fatalf("the hub's view of the device after v0.26.3: %v", hd)
	}
	r.awaitDaemon("v0.26.2", 30*time.Second)
	waitForValue(t, 30*time.Second, "the hub to see v0.26.2 running again", func() deviceRow { return getDevice(t, h, dev) },
		func(hd deviceRow) bool { return hd.Ready && hd.Version == "v0.26.2" })
	if out := mustCLI(t, h, "get", "devices"); !strings.Contains(out, "RolledBack: v0.26.3") {
		t.Fatalf("podhub get devices after v0.26.3:\n%s", out)
	}
	if n := loop.restarts() - restarts; n != 2 {
		t.Fatalf("v0.26.3 rolled back after %d restarts, want 2 (the launcher's count): %v", n, loop.ended())
	}
	slot, rec = currentSlot(t, d.data)
	if rec.Version != "v0.26.2" || rec.State != "committed" || exeOf(loop.pid()) != filepath.Join(slot, "podvisor") {
		t.Fatalf("after the rollback: current slot %s %+v, the daemon runs %s", slot, rec, exeOf(loop.pid()))
	}
	// The journal says what the launcher did.
	if log := loop.log(); !strings.Contains(log, `msg="launcher: executing the current version" binary=`+filepath.Join(d.data, "agent", "slots", "v0.26.3-")) ||
		!strings.Contains(log, `msg="launcher: rolled back" reason="v0.26.3 started 2 times without becoming ready`) {
		t.Errorf("the daemon's log does not show the launcher starting v0.26.3 and rolling it back")
	}
	if slots, _ := filepath.Glob(filepath.Join(d.data, "agent", "slots", "v0.26.3*")); len(slots) != 0 {
		t.Fatalf("the rolled back slot is still there once reported: %v", slots)
	}
	checkPods("after v0.26.3 rolled back")
	mustCLI(t, h, "update", "abort", "podvisor-v0.26.3")
	t.Logf("v0.26.3 rolled back: %s", hd.Update.Reason)
	lap("broken v0.26.3 rolled back by boot counting")

	// 3. Bad input, refused, the running daemon untouched: a release
	// signed with a key the device does not trust, and a downgrade.
	pid, order := loop.pid(), hd.Update.Order
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherKey := filepath.Join(r.root, "other-release.key")
	os.WriteFile(otherKey, protocol.EncodePrivateKey(other), 0o600)
	r.release("v0.26.5", "v0.26.4", "--key", otherKey)
	// A release that does not verify is not believed even for its
	// version: the report names the order.
	hd = waitForValue(t, time.Minute, "the device to refuse v0.26.5 (signed with another key)", func() deviceRow { return getDevice(t, h, dev) },
		func(hd deviceRow) bool {
			return hd.Update != nil && hd.Update.Order > order && protocol.UpdateDone(hd.Update.Phase)
		})
	if hd.Update.Phase != protocol.UpdateFailed || !strings.Contains(hd.Update.Reason, "signature") {
		t.Fatalf("a release signed with another key: %v", hd)
	}
	if u = r.awaitUpdate("v0.26.5", 30*time.Second); u.Status.Phase != "Halted" || !strings.Contains(u.Status.Reason, "signature") {
		t.Fatalf("update podvisor-v0.26.5: %+v", u.Status)
	}
	mustCLI(t, h, "update", "abort", "podvisor-v0.26.5")
	t.Logf("v0.26.5 refused: %s", hd.Update.Reason)

	r.release("v0.26.1", "v0.26.1")
	u = r.awaitUpdate("v0.26.1", 30*time.Second)
	if u.Status.Phase != "Halted" || !strings.Contains(u.Status.Reason, "runs v0.26.2, newer than v0.26.1 (--allow-downgrade to go back)") {
		t.Fatalf("a downgrade without --allow-downgrade: %+v", u.Status)
	}
	mustCLI(t, h, "update", "abort", "podvisor-v0.26.1")
	t.Logf("v0.26.1 refused: %s", u.Status.Reason)
	if hd = getDevice(t, h, dev); hd.Update == nil || hd.Update.Order != order+1 {
		t.Fatalf("the device was ordered the downgrade: %v", hd)
	}
	if now := loop.pid(); now != pid || r.daemonVersion() != "v0.26.2" {
		t.Fatalf("after the refused updates the daemon is pid %d (was %d), version %s", now, pid, r.daemonVersion())
	}
	checkPods("after the refused updates")
	lap("another key's release and a downgrade refused")

	// 4. Power cuts: v0.26.4's daemon killed (-9) mid-download, and again
	// right as it records Restarting (switched, about to execute the
	// launcher). The loop starts it again each time.
	restarts = loop.restarts()
	r.release("v0.26.4", "v0.26.4")
	downloads := filepath.Join(d.data, "agent", "download")
	have := waitForValue(t, time.Minute, "v0.26.4's podvisor 1 MiB into its download", func() int64 { return partBytes(downloads) },
		func(n int64) bool { return n >= 1<<20 })
	killed := loop.kill9()
	t.Logf("power cut 1: killed the daemon (pid %d) with %d bytes of the download on disk", killed, have)
	// The new daemon commits a tenth of a second after the switch: the
	// test looks every 2 ms, and a cut that comes after the commit (the
	// test descheduled that long) still must leave the device whole.
	var last protocol.UpdateState
	pollFast(t, time.Minute, "the daemon to record v0.26.4's Restarting", func() bool {
		last = updateRecord(d.data)
		return last.Version == "v0.26.4" && (last.Phase == protocol.UpdateRestarting || protocol.UpdateDone(last.Phase))
	})
	killed = loop.kill9()
	order = last.Order
	t.Logf("power cut 2: killed the daemon (pid %d) once it recorded %s for order %d", killed, last.Phase, order)
	u = r.awaitUpdate("v0.26.4", 2*time.Minute)
	hd = getDevice(t, h, dev)
	if u.Status.Phase != "Complete" || hd.Version != "v0.26.4" || hd.Update.Phase != protocol.UpdateCommitted || hd.Update.Order != order {
		t.Fatalf("update podvisor-v0.26.4 across two power cuts: %+v; device %v", u.Status, hd)
	}
	r.awaitDaemon("v0.26.4", 30*time.Second)
	slot, rec = currentSlot(t, d.data)
	if rec.Version != "v0.26.4" || rec.State != "committed" || exeOf(loop.pid()) != filepath.Join(slot, "podvisor") {
		t.Fatalf("after the power cuts: current slot %s %+v, the daemon runs %s", slot, rec, exeOf(loop.pid()))
	}
	verifySlot(t, slot, rec)
	if n := loop.restarts() - restarts; n != 2 {
		t.Fatalf("%d restarts across two power cuts, want 2: %v", n, loop.ended())
	}
	if !strings.Contains(loop.log(), `msg="resuming a download"`) {
		t.Errorf("the download cut at %d bytes was not resumed (no \"resuming a download\" in the daemon's log)", have)
	}
	checkPods("after the power cuts")
	r.checkNoZombie("after the power cuts")
	lap("v0.26.4 through two power cuts")
	t.Logf("timings: %s; in all %v", strings.Join(timings, ", "), time.Since(began).Round(100*time.Millisecond))
}

// After an update the daemon runs in the process that ran the previous
// version, the parent of that version's keeper. The keeper, drained once
// the new version starts its own, exits with its last container: the
// daemon reaps it (it leaves no zombie), as it does every child the
// previous version left. The daemon runs with --stop-pods-on-exit, which
// an update's restart must not obey.
func TestSelfUpdateReapsDrainedKeeper(t *testing.T) {
	r := newSURig(t, "gw-keeper", "", "30s", "--stop-pods-on-exit")
	d := r.d
	d.write("old.yaml", processPod("old", "Always", 2, "echo $$$$ > "+filepath.Join(d.dir, "old.pid")+"; exec sleep 7260101"))
	old := runOf(t, d, d.waitPod("old", 30*time.Second, podReady))
	r.podPids = append(r.podPids, old.pid)
	pid, keeper := r.loop.pid(), parentOf(old.pid)
	if parentOf(keeper) != pid {
		t.Fatalf("v0.26.1's keeper %d is the child of %d, want the daemon %d", keeper, parentOf(keeper), pid)
	}
	r.release("v0.26.2", "v0.26.2")
	if u := r.awaitUpdate("v0.26.2", 2*time.Minute); u.Status.Phase != "Complete" {
		t.Fatalf("update podvisor-v0.26.2: %+v", u.Status)
	}
	r.awaitDaemon("v0.26.2", 30*time.Second)
	if now := r.loop.pid(); now != pid {
		t.Fatalf("the daemon is pid %d after the update, was %d: not executed in place", now, pid)
	}
	if now := runOf(t, d, d.waitPod("old", 30*time.Second, podReady)); now != old {
		t.Fatalf("old after the update (--stop-pods-on-exit): %+v, want the same container %+v", now, old)
	}
	// A new pod starts v0.26.2's keeper, which drains v0.26.1's.
	d.write("new.yaml", processPod("new", "Always", 2, "echo $$$$ > "+filepath.Join(d.dir, "new.pid")+"; exec sleep 7260102"))
	fresh := runOf(t, d, d.waitPod("new", 30*time.Second, podReady))
	r.podPids = append(r.podPids, fresh.pid)
	if parentOf(fresh.pid) == keeper {
		t.Fatalf("the pod started after the update runs under v0.26.1's keeper %d", keeper)
	}
	d.remove("old.yaml")
	d.waitGone("old", 30*time.Second)
	waitForLong(t, 20*time.Second, fmt.Sprintf("v0.26.1's keeper %d, drained, to exit with its last container and be reaped by the daemon %d", keeper, pid),
		func() bool { _, err := os.Stat(fmt.Sprintf("/proc/%d", keeper)); return err != nil })
	r.checkNoZombie("once v0.26.1's keeper exited")
}

// A version that cannot prove itself within update.commitTimeout (here it
// cannot reach the hub, stopped as the device switches) is rolled back by
// its own commit gate, in the same process: the previous version comes
// back with the pod untouched, and the hub, once back, sees the rollback
// with its reason and halts the update.
func TestSelfUpdateGateRollsBack(t *testing.T) {
	r := newSURig(t, "gw-gate", "", "10s") // the least it may be
	d := r.d
	d.write("kept.yaml", processPod("kept", "Always", 2, "echo $$$$ > "+filepath.Join(d.dir, "kept.pid")+"; exec sleep 7260201"))
	kept := runOf(t, d, d.waitPod("kept", 30*time.Second, podReady))
	r.podPids = append(r.podPids, kept.pid)
	r.release("v0.26.2", "v0.26.2")
	if u := r.awaitUpdate("v0.26.2", 2*time.Minute); u.Status.Phase != "Complete" {
		t.Fatalf("update podvisor-v0.26.2: %+v", u.Status)
	}
	r.awaitDaemon("v0.26.2", 30*time.Second)
	pid := r.loop.pid()
	r.release("v0.26.4", "v0.26.4")
	// The hub goes as soon as the device has the release (it stages it):
	// the new version, a moment later, cannot reach it.
	pollFast(t, time.Minute, "v0.26.4 downloaded and staged", func() bool {
		staged, _ := filepath.Glob(filepath.Join(d.data, "agent", "slots", "v0.26.4-*"))
		return len(staged) > 0
	})
	r.h.stop()
	stopped := time.Now()
	r.awaitDaemon("v0.26.4", 30*time.Second)
	r.awaitDaemon("v0.26.2", time.Minute)
	t.Logf("v0.26.4 rolled back by its gate %v after the hub stopped", time.Since(stopped).Round(time.Millisecond))
	if now := r.loop.pid(); now != pid || r.loop.restarts() != 0 {
		t.Fatalf("the daemon is pid %d after the rollback (was %d), %d restarts: want the same process", now, pid, r.loop.restarts())
	}
	slot, rec := currentSlot(t, d.data)
	if rec.Version != "v0.26.2" || rec.State != "committed" || exeOf(pid) != filepath.Join(slot, "podvisor") {
		t.Fatalf("after the rollback: current slot %s %+v, the daemon runs %s", slot, rec, exeOf(pid))
	}
	r.h.start()
	u := r.awaitUpdate("v0.26.4", time.Minute)
	want := "v0.26.4: no heartbeat receipt from the hub within 10s"
	if hd := getDevice(t, r.h, r.dev); u.Status.Phase != "Halted" || !strings.Contains(u.Status.Reason, want) ||
		hd.Update == nil || hd.Update.Phase != protocol.UpdateRolledBack || hd.Update.Reason != want {
		t.Fatalf("update podvisor-v0.26.4: %+v; device %v; want RolledBack: %s", u.Status, hd, want)
	}
	if now := runOf(t, d, d.waitPod("kept", 30*time.Second, podReady)); now != kept {
		t.Fatalf("kept after the rollback: %+v, want the same container %+v", now, kept)
	}
	r.checkNoZombie("after the rollback")
}

// suPods are the pods that live through every update: two from the
// manifests directory (a readiness probe; a completed init container) and
// two from the hub. Each main container writes its pid to DIR/NAME.pid
// and sleeps for a time of its own, so its copies can be counted.
func suPods(dir string) map[string]string {
	main := func(name string, n int) string {
		return fmt.Sprintf(`["sh", "-c", "echo $$$$ > %s; exec sleep %d"]`, filepath.Join(dir, name+".pid"), suSleep+n)
	}
	return map[string]string{
		"file-ready": `apiVersion: v1
kind: Pod
metadata: {name: file-ready}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: host
    command: ` + main("file-ready", 1) + `
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
`,
		"file-inited": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: file-inited}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 2
  initContainers:
  - {name: init, image: host, command: ["sh", "-c", "echo ran >> %s"]}
  containers:
  - {name: main, image: host, command: %s}
`, filepath.Join(dir, "file-inited.init"), main("file-inited", 2)),
		"hub-web": `apiVersion: v1
kind: Pod
metadata: {name: hub-web}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: host, command: ` + main("hub-web", 3) + `}
`,
		"hub-worker": `apiVersion: v1
kind: Pod
metadata: {name: hub-worker}
spec:
  runtimeClassName: process
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: host, command: ` + main("hub-worker", 4) + `}
`,
	}
}

// suSleep numbers the pods' sleeps (suSleep+1...).
const suSleep = 7260000

// checkSelfUpdatePods checks that every pod still runs its first
// container: the same process (pid and start time), container ID, start
// time and a restart count of 0; that each runs once (one process of its
// sleep, one row in podvisor get pods); and that the init container ran
// once.
func checkSelfUpdatePods(t *testing.T, d *daemon, when string, before map[string]containerRun) {
	t.Helper()
	for name, was := range before {
		p := d.waitPod(name, 30*time.Second, podReady)
		if now := runOf(t, d, p); now != was {
			t.Fatalf("%s %s: %+v, want the same container %+v\n%s", name, when, now, was, describePod(p))
		}
	}
	out, errOut, code := d.cli("get", "pods")
	for name := range before {
		rows := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				rows++
			}
		}
		if rows != 1 || !hasPodRow(out, name, "1/1", "Running", "0") {
			t.Fatalf("podvisor get pods %s (exit %d): %s in %d rows, want one, running, ready, never restarted:\n%s%s", when, code, name, rows, out, errOut)
		}
	}
	for i := 1; i <= len(before); i++ {
		if n := countSleeps(suSleep + i); n != 1 {
			t.Fatalf("%s: %d processes run sleep %d, want 1", when, n, suSleep+i)
		}
	}
	if runs := readLines(filepath.Join(d.dir, "file-inited.init")); len(runs) != 1 {
		t.Fatalf("%s: the init container ran %d times, want once", when, len(runs))
	}
}

// countSleeps counts the live processes running sleep n.
func countSleeps(n int) int {
	want := "sleep\x00" + strconv.Itoa(n) + "\x00"
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	count := 0
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil || string(b) != want {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if !exited(pid) {
			count++
		}
	}
	return count
}

// partBytes is how much of the downloads under way is on disk.
func partBytes(downloads string) int64 {
	parts, _ := filepath.Glob(filepath.Join(downloads, "*", "*.part"))
	var n int64
	for _, p := range parts {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// updateRecord is the last update state the device recorded
// (agent/state.json: Restarting and every final one).
func updateRecord(data string) protocol.UpdateState {
	var s protocol.UpdateState
	b, err := os.ReadFile(filepath.Join(data, "agent", "state.json"))
	if err == nil {
		_ = json.Unmarshal(b, &s)
	}
	return s
}
