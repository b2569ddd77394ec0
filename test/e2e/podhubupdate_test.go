package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/simfleet"
)

// updateSims are simulated devices that update themselves (simfleet's
// UpdateDevice), with the most of them busy at once.
type updateSims struct {
	devices []*simfleet.UpdateDevice
	mu      sync.Mutex
	busy    int
	peak    int
}

func (s *updateSims) setBusy(_ string, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if busy {
		s.busy++
		s.peak = max(s.peak, s.busy)
	} else {
		s.busy--
	}
}

func (s *updateSims) resetPeak() {
	s.mu.Lock()
	s.peak = s.busy
	s.mu.Unlock()
}

func (s *updateSims) ordered() (n int64) {
	for _, d := range s.devices {
		n += d.Ordered.Load()
	}
	return n
}

// startUpdateSims enrols n devices (label kind=sim) and starts them,
// running v1.0.0; fail says why one rolls back a release.
func startUpdateSims(t *testing.T, h *podhubServer, n int, fail func(id string, r *protocol.Release) string) *updateSims {
	t.Helper()
	enrolled, err := simfleet.LoadEnrolment(h.dataDir, h.addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &updateSims{}
	for i := range n {
		id := simID(i)
		if out, code := h.cli("label", "device", id, "kind=sim"); code != 0 {
			t.Fatalf("label %s: %s", id, out)
		}
		creds, err := enrolled.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		d := creds.UpdateDevice(simfleet.UpdateConfig{Arch: runtime.GOARCH, Version: "v1.0.0", Busy: s.setBusy, Window: 8,
			Fail: func(r *protocol.Release) string { return fail(id, r) }})
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		s.devices = append(s.devices, d)
	}
	waitForLong(t, time.Minute, fmt.Sprintf("%d simulated devices Ready at the hub", n), func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Count(out, " Ready ") >= n
	})
	return s
}

// releaseFiles are the binaries a release is pushed from: this test's
// build (podvisor, podvisor-shim, podvisor-containerd as they ship), and
// the arm64 ones of make build when bin/arm64 holds them.
func releaseFiles(t *testing.T) []string {
	dir := filepath.Dir(binary)
	var files []string
	for _, name := range protocol.AgentArtifacts {
		files = append(files, "--file", filepath.Join(dir, name))
	}
	arm := filepath.Join(repoRoot(t), "bin", "arm64")
	for _, name := range protocol.AgentArtifacts {
		if _, err := os.Stat(filepath.Join(arm, name)); err == nil {
			files = append(files, "--file", filepath.Join(arm, name))
		}
	}
	return files
}

// updateStatus is podhub's view of an update.
type updateStatus struct {
	Spec struct {
		Name    string
		Targets []string
	}
	Status struct {
		Phase, Reason                                       string
		Targets, Done, Failed, InProgress, Waiting, Offline int
		Updated                                             time.Time // stamped by every pass
	}
}

func getUpdate(t *testing.T, h *podhubServer, name string) updateStatus {
	out, code := h.cli("get", "updates", "-o", "json")
	if code != 0 {
		t.Fatalf("get updates: %s", out)
	}
	var us []updateStatus
	if err := json.Unmarshal([]byte(out), &us); err != nil {
		t.Fatalf("get updates: %v\n%s", err, out)
	}
	for _, u := range us {
		if u.Spec.Name == name {
			return u
		}
	}
	t.Fatalf("no update %s in %s", name, out)
	return updateStatus{}
}

// wireBytes is what a device of arch moves for a release: its
// artifacts' transfer sizes, from podhub describe release -o json.
func wireBytes(t *testing.T, h *podhubServer, arch string) int64 {
	out := mustCLI(t, h, "get", "releases", "-o", "json")
	var rs []struct {
		Version   string
		Artifacts []protocol.Artifact
	}
	json.Unmarshal([]byte(out), &rs)
	var n int64
	for _, a := range rs[0].Artifacts {
		if a.Arch == arch {
			_, size := a.Transfer()
			n += size
		}
	}
	return n
}

// Fleet self-update through podhub with 20 simulated devices that really
// move the release's binaries through the broker: a release rolls out
// in waves of 25 % (never more than 5 devices at once, a hub restart in
// the middle neither losing nor repeating an order), then a release that
// 30 % of the devices roll back halts with the reason, and no further
// device is ordered. Each device takes its ~30 MB at the hub's default
// 4 MiB/s, so a wave lasts ~8 s whatever its size: four waves, not ten
// (10 % of 50 devices took two minutes), exercise the same pacing, the
// restart mid-wave and the halt judged on 5 verdicts.
func TestPodhubUpdateInWavesAndHalt(t *testing.T) {
	if testing.Short() && !prereq.CI() {
		t.Skip("long (about a minute): skipped under -short, never in CI")
	}
	h := newPodhub(t)
	const n = 20
	failing := func(id string) bool { var i int; fmt.Sscanf(id, "sim-%d", &i); return i%10 < 3 }
	sims := startUpdateSims(t, h, n, func(id string, r *protocol.Release) string {
		if r.Version == "v1.2.0" && failing(id) {
			return "simulated: the new daemon did not adopt its pods within 5m"
		}
		return ""
	})

	push := append([]string{"release", "push", "--version", "v1.1.0"}, releaseFiles(t)...)
	t.Log(mustCLI(t, h, push...))
	perDevice := wireBytes(t, h, runtime.GOARCH)
	start := time.Now()
	t.Log(mustCLI(t, h, "update", "--version", "v1.1.0", "--selector", "kind=sim", "--max-unavailable", "25%"))
	waitForLong(t, 2*time.Minute, "the first wave under way", func() bool { return sims.ordered() >= 3 })
	// podhub restarted mid-update: its orders are stored, published again,
	// and neither lost nor made twice.
	h.stop()
	h.start()
	waitForLong(t, 5*time.Minute, "update podvisor-v1.1.0 Complete", func() bool {
		return getUpdate(t, h, "podvisor-v1.1.0").Status.Phase == "Complete"
	})
	t.Logf("v1.1.0 on %d devices in %s, %d bytes each, at most %d at once", n, time.Since(start).Round(time.Millisecond), perDevice, sims.peak)
	if sims.peak > 5 {
		t.Errorf("%d devices updating at once, over max-unavailable 5 (25%% of %d)", sims.peak, n)
	}
	for _, d := range sims.devices {
		if d.Running() != "v1.1.0" || d.Ordered.Load() != 1 || d.Received.Load() < perDevice {
			t.Errorf("%s: runs %s after %d orders, received %d bytes of %d", d.ID, d.Running(), d.Ordered.Load(), d.Received.Load(), perDevice)
		}
	}
	devices := mustCLI(t, h, "get", "devices")
	if !strings.Contains(devices, "v1.1.0") || !strings.Contains(devices, "Committed v1.1.0") {
		t.Errorf("get devices shows no version or update:\n%s", devices)
	}

	// A release that 30 % of the devices roll back.
	t.Log(mustCLI(t, h, append([]string{"release", "push", "--version", "v1.2.0"}, releaseFiles(t)...)...))
	sims.resetPeak()
	before := sims.ordered()
	t.Log(mustCLI(t, h, "update", "--version", "v1.2.0", "--selector", "kind=sim", "--max-unavailable", "25%"))
	u := waitForValue(t, 3*time.Minute, "update podvisor-v1.2.0 Halted", func() updateStatus {
		return getUpdate(t, h, "podvisor-v1.2.0")
	}, func(u updateStatus) bool { return u.Status.Phase == "Halted" })
	if !strings.Contains(u.Status.Reason, "over the failure threshold of 10%") || !strings.Contains(u.Status.Reason, "simulated: the new daemon did not adopt its pods") {
		t.Errorf("halt reason %q", u.Status.Reason)
	}
	// The devices ordered before the halt finish; then no device is
	// ordered, across two of the driver's periods.
	waitForLong(t, time.Minute, "the devices ordered before the halt to finish", func() bool {
		return getUpdate(t, h, "podvisor-v1.2.0").Status.InProgress == 0
	})
	ordered := sims.ordered() - before
	// Two more passes of the update driver with nothing to order: it
	// passes when a report may move an update, here two devices not yet
	// ordered going offline one after the other, and each pass stamps
	// the status it stores.
	quiet := 0
	for _, d := range sims.devices {
		if quiet == 2 {
			break
		}
		if d.Ordered.Load() != 1 || failing(d.ID) {
			continue
		}
		stamp := getUpdate(t, h, "podvisor-v1.2.0").Status.Updated
		d.Stop()
		waitForLong(t, time.Minute, "a pass of the update driver after "+d.ID+" went offline", func() bool {
			return getUpdate(t, h, "podvisor-v1.2.0").Status.Updated.After(stamp)
		})
		quiet++
	}
	u = getUpdate(t, h, "podvisor-v1.2.0")
	if after := sims.ordered() - before; after != ordered || int64(u.Status.Done+u.Status.Failed) != ordered || ordered >= n {
		t.Errorf("%d devices ordered at the halt, %d after; status %+v", ordered, after, u.Status)
	}
	t.Logf("v1.2.0 halted after %d orders: %s", ordered, u.Status.Reason)
	if out, code := h.cli("update", "status", "podvisor-v1.2.0"); code != 1 || !strings.Contains(out, "halted") {
		t.Errorf("update status of a halted update: %d %s", code, out)
	}
	if out, code := h.cli("update", "status", "podvisor-v1.1.0"); code != 0 || !strings.Contains(out, fmt.Sprintf("complete: %d of %d devices run v1.1.0", n, n)) {
		t.Errorf("update status of a complete update: %d %s", code, out)
	}
	devices = mustCLI(t, h, "get", "devices")
	if !strings.Contains(devices, "RolledBack: simulated") {
		t.Errorf("get devices shows no rollback:\n%s", devices)
	}
	for _, d := range sims.devices {
		if failing(d.ID) && d.Ordered.Load() == 2 {
			desc := mustCLI(t, h, "describe", "device", d.ID)
			if !strings.Contains(desc, "Update:") || !strings.Contains(desc, "RolledBack") {
				t.Errorf("describe device %s shows no update:\n%s", d.ID, desc)
			}
			break
		}
	}
	if out, code := h.cli("delete", "release", "v1.2.0"); code == 0 || !strings.Contains(out, "used by update podvisor-v1.2.0") {
		t.Errorf("deleting a release a halted update uses: %d %s", code, out)
	}
	mustCLI(t, h, "update", "abort", "podvisor-v1.2.0")
	mustCLI(t, h, "delete", "release", "v1.2.0")
}
