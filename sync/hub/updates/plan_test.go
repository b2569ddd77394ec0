package updates

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// fleet is a fake fleet the tests drive pass by pass: each device acts
// on its order as the test says, and the clock moves by hand.
type fleet struct {
	t       *testing.T
	spec    Spec
	rel     Release
	devices map[string]*Device
	status  Status
	now     time.Time
	orders  int64
	// peak is the most devices in progress after any pass.
	peak int
}

func newFleet(t *testing.T, n int, spec Spec) *fleet {
	f := &fleet{t: t, spec: spec, rel: Release{Kind: protocol.ReleaseAgent, Version: "v1.2.0", Arches: []string{"amd64", "arm64"}},
		devices: map[string]*Device{}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.spec.Name, f.spec.Version = "podvisor-v1.2.0", "v1.2.0"
	for i := range n {
		id := fmt.Sprintf("d%03d", i)
		f.spec.Targets = append(f.spec.Targets, id)
		f.devices[id] = &Device{ID: id, Ready: true, Arch: "arm64", Running: "v1.1.0"}
	}
	return f
}

// pass runs the controller, gives each ordered device its order, and
// returns the devices ordered.
func (f *fleet) pass() []string {
	f.t.Helper()
	in := Input{Spec: f.spec, Release: f.rel, Previous: f.status, Now: f.now}
	for _, d := range f.devices {
		in.Devices = append(in.Devices, *d)
	}
	dec := Plan(in)
	for _, id := range dec.Order {
		f.orders++
		f.devices[id].Order = f.orders
	}
	f.status = dec.Status
	f.peak = max(f.peak, dec.Status.InProgress)
	if dec.Status.InProgress > dec.Status.MaxUnavailable {
		f.t.Fatalf("%d devices in progress, over max-unavailable %d", dec.Status.InProgress, dec.Status.MaxUnavailable)
	}
	f.now = f.now.Add(time.Second)
	return dec.Order
}

// report sets a device's report on its order.
func (f *fleet) report(id, phase, reason string) {
	d := f.devices[id]
	d.State = &protocol.UpdateState{Device: id, Order: d.Order, Kind: protocol.ReleaseAgent, Version: "v1.2.0", Phase: phase, Reason: reason}
}

// commit is a device that committed and whose heartbeat says v1.2.0.
func (f *fleet) commit(id string) {
	f.report(id, protocol.UpdateCommitted, "")
	f.devices[id].Running = "v1.2.0"
}

func TestUpdateRollsOutInWaves(t *testing.T) {
	f := newFleet(t, 50, Spec{MaxUnavailable: "10%"})
	waves := 0
	for f.status.Phase != Complete {
		ordered := f.pass()
		if f.status.Phase == Complete {
			break
		}
		if len(ordered) != 5 {
			t.Fatalf("wave %d: ordered %d devices, want 5 (10%% of 50): %v", waves, len(ordered), ordered)
		}
		waves++
		// A pass before the wave reports orders nothing more.
		if more := f.pass(); len(more) != 0 {
			t.Fatalf("ordered %v while the wave is under way", more)
		}
		for _, id := range ordered {
			f.report(id, protocol.UpdateDownloading, "")
		}
		f.pass()
		if got := f.status.Devices; !strings.Contains(fmt.Sprint(got), protocol.UpdateDownloading) {
			t.Fatalf("no device shows Downloading: %v", got)
		}
		// Committed without the new version in a heartbeat is not done yet.
		for _, id := range ordered {
			f.report(id, protocol.UpdateCommitted, "")
		}
		if more := f.pass(); len(more) != 0 || f.status.Done != (waves-1)*5 {
			t.Fatalf("committed devices without a heartbeat counted done: ordered %v, done %d", more, f.status.Done)
		}
		for _, id := range ordered {
			f.commit(id)
		}
		if waves > 20 {
			t.Fatal("no end")
		}
	}
	if waves != 10 || f.status.Done != 50 || f.status.Finished == nil || f.peak != 5 {
		t.Fatalf("waves %d, status %+v, peak %d: want 10 waves of 5, all done", waves, f.status, f.peak)
	}
}

func TestUpdateWaitsForOfflineDevices(t *testing.T) {
	f := newFleet(t, 4, Spec{MaxUnavailable: "2"})
	f.devices["d000"].Ready = false
	f.devices["d001"].Ready = false
	if got := f.pass(); fmt.Sprint(got) != "[d002 d003]" {
		t.Fatalf("ordered %v, want the two reachable devices", got)
	}
	if f.status.Offline != 2 {
		t.Fatalf("offline %d, want 2", f.status.Offline)
	}
	f.commit("d002")
	f.commit("d003")
	// An ordered device that goes offline (restarting) stays in progress.
	if got := f.pass(); len(got) != 0 {
		t.Fatalf("ordered %v while every other device is offline", got)
	}
	f.devices["d000"].Ready = true
	if got := f.pass(); fmt.Sprint(got) != "[d000]" {
		t.Fatalf("ordered %v once d000 is back, want [d000]", got)
	}
	f.devices["d000"].Ready = false // restarting into the new version
	if got := f.pass(); len(got) != 0 || f.status.InProgress != 1 {
		t.Fatalf("ordered %v, in progress %d: an ordered device offline is still in progress", got, f.status.InProgress)
	}
	f.commit("d000")
	f.devices["d001"].Ready = true
	f.pass()
	f.commit("d001")
	f.pass()
	if f.status.Phase != Complete {
		t.Fatalf("status %+v, want Complete", f.status)
	}
}

func TestUpdateFailsDevicesWithoutTheirArchitecture(t *testing.T) {
	f := newFleet(t, 3, Spec{MaxUnavailable: "3", FailureThreshold: "100%"})
	f.devices["d000"].Arch = "riscv64"
	f.devices["d001"].Arch = "arm"       // armv6 or armv7: the release has neither
	f.devices["d002"].Running = "v1.2.0" // already there: done without an order
	if got := f.pass(); len(got) != 0 {
		t.Fatalf("ordered %v", got)
	}
	for _, ds := range f.status.Devices[:2] {
		if ds.State != StateFailed || !strings.Contains(ds.Reason, "no binaries for its architecture") {
			t.Errorf("%s: %+v, want failed for its architecture", ds.ID, ds)
		}
	}
	if ds := f.status.Devices[2]; ds.State != StateDone || ds.Order != 0 {
		t.Errorf("d002 %+v, want done without an order", ds)
	}
	// With armv7 in the release, an "arm" device is ordered (it knows its
	// own variant and refuses another).
	f = newFleet(t, 1, Spec{})
	f.rel.Arches = []string{"armv7"}
	f.devices["d000"].Arch = "arm"
	if got := f.pass(); len(got) != 1 {
		t.Fatalf("arm device not ordered an armv7 release: %+v", f.status)
	}
	// No architecture reported yet: waits.
	f = newFleet(t, 1, Spec{})
	f.devices["d000"].Arch = ""
	if got := f.pass(); len(got) != 0 || f.status.Offline != 1 {
		t.Fatalf("ordered %v before the device said its architecture", got)
	}
}

func TestUpdateRefusesDowngradeUnlessAllowed(t *testing.T) {
	f := newFleet(t, 1, Spec{})
	f.devices["d000"].Running = "v1.3.0"
	if got := f.pass(); len(got) != 0 || !strings.Contains(f.status.Devices[0].Reason, "allow-downgrade") {
		t.Fatalf("ordered %v, status %+v: want refused as a downgrade", got, f.status.Devices[0])
	}
	f = newFleet(t, 1, Spec{AllowDowngrade: true})
	f.devices["d000"].Running = "v1.3.0"
	if got := f.pass(); len(got) != 1 {
		t.Fatalf("downgrade allowed, not ordered: %+v", f.status)
	}
}

func TestUpdateHaltsOverTheFailureThreshold(t *testing.T) {
	f := newFleet(t, 50, Spec{MaxUnavailable: "10%"}) // default threshold 10%
	wave := f.pass()
	// One failure in the first wave of five: 20% > 10% once 5 verdicts.
	f.report(wave[0], protocol.UpdateRolledBack, "the new daemon did not adopt pod web")
	for _, id := range wave[1:4] {
		f.commit(id)
	}
	// Four verdicts, fewer than a wave: not judged yet; room for 4 more.
	if got := f.pass(); len(got) != 4 || f.status.Phase != Progressing {
		t.Fatalf("ordered %v, phase %s: want 4 more before the threshold is judged", got, f.status.Phase)
	}
	f.commit(wave[4])
	if got := f.pass(); len(got) != 0 || f.status.Phase != Halted {
		t.Fatalf("ordered %v, status %+v: want Halted", got, f.status)
	}
	for _, want := range []string{"1 of 5", "over the failure threshold of 10%", wave[0] + ": RolledBack: the new daemon did not adopt pod web"} {
		if !strings.Contains(f.status.Reason, want) {
			t.Errorf("halt reason %q lacks %q", f.status.Reason, want)
		}
	}
	// Halted stays halted, even once the later devices commit; nothing more
	// is ordered.
	for _, d := range f.devices {
		if d.Order > 0 && d.State == nil {
			f.commit(d.ID)
		}
	}
	for range 3 {
		if got := f.pass(); len(got) != 0 || f.status.Phase != Halted || f.status.Finished == nil {
			t.Fatalf("after the halt: ordered %v, status %s", got, f.status.Phase)
		}
	}
	if f.status.Done != 8 || f.status.Failed != 1 {
		t.Fatalf("done %d failed %d, want 8 and 1", f.status.Done, f.status.Failed)
	}
}

func TestUpdateFailureUnderThresholdCompletes(t *testing.T) {
	f := newFleet(t, 20, Spec{MaxUnavailable: "10", FailureThreshold: "10%"})
	for f.status.Phase != Complete && f.status.Phase != Halted {
		for _, id := range f.pass() {
			if id == "d003" {
				f.report(id, protocol.UpdateFailed, "disk full")
			} else {
				f.commit(id)
			}
		}
		if f.now.After(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)) {
			t.Fatal("no end")
		}
	}
	// One of 20 failed (5%): under the threshold, the update completes and
	// says which device failed.
	if f.status.Phase != Complete || f.status.Failed != 1 || f.status.Done != 19 || !strings.Contains(f.status.Reason, "d003: Failed: disk full") {
		t.Fatalf("status %+v", f.status)
	}
}

func TestUpdatePauseResumeAbort(t *testing.T) {
	f := newFleet(t, 10, Spec{MaxUnavailable: "2"})
	first := f.pass()
	f.spec.Paused = true
	for _, id := range first {
		f.commit(id)
	}
	if got := f.pass(); len(got) != 0 || f.status.Phase != Paused || f.status.Done != 2 {
		t.Fatalf("paused: ordered %v, status %+v", got, f.status)
	}
	f.spec.Paused = false
	second := f.pass()
	if len(second) != 2 || f.status.Phase != Progressing {
		t.Fatalf("resumed: ordered %v, status %s", second, f.status.Phase)
	}
	f.spec.Aborted = true
	in := Input{Spec: f.spec, Release: f.rel, Previous: f.status, Now: f.now}
	for _, d := range f.devices {
		in.Devices = append(in.Devices, *d)
	}
	dec := Plan(in)
	if len(dec.Order) != 0 || dec.Status.Phase != Aborted || dec.Status.Running() || fmt.Sprint(dec.Withdraw) != fmt.Sprint(second) {
		t.Fatalf("aborted: %+v, want no order, the two in progress withdrawn", dec)
	}
}

func TestParseBounds(t *testing.T) {
	for _, c := range []struct {
		s       string
		targets int
		want    int
		bad     bool
	}{{"10%", 50, 5, false}, {"10%", 5, 1, false}, {"3", 50, 3, false}, {"", 200, 20, false},
		{"0", 5, 0, true}, {"-1", 5, 0, true}, {"101%", 5, 0, true}, {"x", 5, 0, true}, {"+3", 5, 0, true}} {
		got, err := ParseMaxUnavailable(c.s, c.targets)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("ParseMaxUnavailable(%q, %d) = %d, %v", c.s, c.targets, got, err)
		}
	}
	for _, c := range []struct {
		s    string
		want int
		bad  bool
	}{{"", 10, false}, {"25%", 25, false}, {"100", 100, false}, {"0%", 0, true}, {"150%", 0, true}, {"%", 0, true}} {
		got, err := ParseFailureThreshold(c.s)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("ParseFailureThreshold(%q) = %d, %v", c.s, got, err)
		}
	}
}

// A firmware release has no architecture: every device may take it, and
// its running bundle version comes from its reports, not its heartbeat.
func TestFirmwareUpdateIgnoresArchitecture(t *testing.T) {
	f := newFleet(t, 2, Spec{MaxUnavailable: "2"})
	f.rel = Release{Kind: protocol.ReleaseFirmware, Version: "v1.2.0"}
	f.devices["d000"].Arch = "riscv64"
	f.devices["d001"].Arch = ""
	f.devices["d000"].Running, f.devices["d001"].Running = "", ""
	if got := f.pass(); len(got) != 2 {
		t.Fatalf("ordered %v, want both devices", got)
	}
}
