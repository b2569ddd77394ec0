package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/prereq"
)

// install runs one order on u synchronously.
func install(u *Updater, o *protocol.Order) { u.handle(context.Background(), o) }

// commitCurrent runs the commit gate of the current trial slot as the new
// daemon would, its start-up over.
func commitCurrent(t *testing.T, u *Updater) bool {
	t.Helper()
	cur, err := u.layout.Linked(linkCurrent)
	if err != nil || cur == nil {
		t.Fatalf("no current slot: %v", err)
	}
	ready := make(chan struct{})
	close(ready)
	return u.gate(context.Background(), cur, GateSignals{Ready: ready})
}

// An update from the packaged binary, then two more: each is staged,
// switched to and committed; files unchanged are copied, not downloaded;
// only current and previous are kept.
func TestInstallSwitchCommitCollect(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	restarts := 0
	u := newUpdater(dir, "v1.2.0", hub)
	u.o.Restart = func() { restarts++ }

	r13 := newRelease(t, hub, "v1.3.0", "arm64", 64<<10, 1)
	install(u, r13.order(t, 1))
	if s := hub.last(); s.Phase != protocol.UpdateRestarting || s.Version != "v1.3.0" || restarts != 1 {
		t.Fatalf("after the install: %+v, %d restarts; want Restarting once", s, restarts)
	}
	assertCurrentIs(t, dir, r13, StateTrial)
	if p, _ := u.layout.Linked(linkPrevious); p != nil {
		t.Fatalf("previous is %s; want none (the packaged binary)", p.Name)
	}
	if _, err := os.Stat(u.layout.handoffPath()); err != nil {
		t.Fatalf("no handoff: %v", err)
	}
	// The same order again (retained, sent at reconnect): nothing twice.
	install(u, r13.order(t, 1))
	if restarts != 1 {
		t.Fatal("the order sent again was installed again")
	}

	u13 := newUpdater(dir, "v1.3.0", hub)
	if !commitCurrent(t, u13) {
		t.Fatal("the gate rolled back")
	}
	if s := hub.last(); s.Phase != protocol.UpdateCommitted || s.Running != "v1.3.0" || s.Order != 1 {
		t.Fatalf("after the gate: %+v; want Committed, running v1.3.0", s)
	}
	assertCurrentIs(t, dir, r13, StateCommitted)

	// v1.4.0 has the same shim: only podvisor is downloaded.
	r14 := newRelease(t, hub, "v1.4.0", "arm64", 64<<10, 2)
	r14.files["podvisor-shim"] = r13.files["podvisor-shim"]
	r14.rel.Artifacts[1] = r13.rel.Artifacts[1]
	hub.downloads = 0
	install(u13, r14.order(t, 2))
	if hub.downloads != 1 {
		t.Fatalf("%d downloads; want 1 (the shim is copied from the current slot)", hub.downloads)
	}
	assertCurrentIs(t, dir, r14, StateTrial)
	u14 := newUpdater(dir, "v1.4.0", hub)
	commitCurrent(t, u14)
	if s := hub.last(); s.Phase != protocol.UpdateCommitted || s.Previous != "v1.3.0" {
		t.Fatalf("after the gate: %+v; want Committed, previous v1.3.0", s)
	}

	r15 := newRelease(t, hub, "v1.5.0", "arm64", 64<<10, 3)
	install(u14, r15.order(t, 3))
	commitCurrent(t, newUpdater(dir, "v1.5.0", hub))
	slots, _ := os.ReadDir(u.layout.slots())
	var names []string
	for _, s := range slots {
		names = append(names, s.Name())
	}
	if len(names) != 2 || !strings.HasPrefix(names[0], "v1.4.0-") || !strings.HasPrefix(names[1], "v1.5.0-") {
		t.Fatalf("slots %v; want v1.4.0 (previous) and v1.5.0 (current)", names)
	}
	if entries, _ := os.ReadDir(u.layout.downloads()); len(entries) != 0 {
		t.Fatalf("downloads left: %v", entries)
	}
}

// A new version whose gate fails is rolled back; the version that comes
// back reports RolledBack with the reason, and the failed slot goes.
func TestGateRollsBack(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	web := Container{PodUID: "u1", Pod: "default/web", Name: "nginx", ID: "podvisor://1"}
	u := newUpdater(dir, "v1.2.0", hub)
	u.o.Containers = func() []Container { return []Container{web} }
	r13 := newRelease(t, hub, "v1.3.0", "arm64", 32<<10, 1)
	install(u, r13.order(t, 7))

	restarted := web
	restarted.ID = "podvisor://2"
	u13 := newUpdater(dir, "v1.3.0", hub)
	u13.o.Containers = func() []Container { return []Container{restarted} }
	restarts := 0
	u13.o.Restart = func() { restarts++ }
	if commitCurrent(t, u13) || restarts != 1 {
		t.Fatalf("the gate committed (%d restarts); want a rollback and a restart", restarts)
	}
	assertNoCurrent(t, dir) // the packaged binary is the way back
	failed := u13.layout.Failed()
	if len(failed) != 1 || !strings.Contains(failed[0].Record.LastError, "v1.3.0: container nginx of pod default/web was restarted") {
		t.Fatalf("failed slots %+v; want v1.3.0 with the reason", failed)
	}

	back := newUpdater(dir, "v1.2.0", hub)
	back.Start(t.Context(), GateSignals{})
	s := hub.last()
	if s.Phase != protocol.UpdateRolledBack || s.Order != 7 || s.Running != "v1.2.0" || s.Previous != "v1.3.0" ||
		!strings.Contains(s.Reason, "was restarted") {
		t.Fatalf("report %+v; want RolledBack of order 7 with the reason", s)
	}
	if len(back.layout.Failed()) != 0 {
		t.Fatal("the failed slot is still there after its report")
	}
}

// Every bad order is refused with a clear reason, leaves nothing behind,
// and the version running stays current.
func TestBadOrdersRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		running string
		edit    func(r *release, o *protocol.Order)
		reason  string
	}{
		{name: "wrong signature", edit: func(r *release, o *protocol.Order) {}, reason: "does not verify with key"},
		{name: "wrong arch", edit: nil, reason: "release v1.3.0 has no binaries for arm64 (it has armv7)"},
		{name: "downgrade", running: "v1.4.0", reason: "release v1.3.0 is older than the running v1.4.0: a downgrade, refused without allowDowngrade"},
		{name: "running version not semantic", running: "dev", reason: `the running version "dev" is not a semantic version`},
		{name: "truncated artifact", reason: "podvisor: downloaded"},
		{name: "wrong hash on the wire", reason: "podvisor: downloaded bytes have SHA-256"},
		{name: "wrong hash decoded", reason: "podvisor: SHA-256"},
		{name: "decodes to more than declared", reason: "bytes, the release says"},
		{name: "firmware without a driver", reason: "no firmware driver configured (firmware.driver)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			hub := &fakeHub{}
			running := c.running
			if running == "" {
				running = "v1.2.0"
			}
			arch := "arm64"
			if c.name == "wrong arch" {
				arch = "armv7"
			}
			r := newRelease(t, hub, "v1.3.0", arch, 16<<10, 5)
			sha, _ := r.rel.Artifacts[0].Transfer()
			wire := hub.files[sha]
			switch c.name {
			case "truncated artifact":
				hub.files[sha] = wire[:len(wire)-100]
			case "wrong hash on the wire":
				bad := append([]byte(nil), wire...)
				bad[len(bad)/2] ^= 0xff
				hub.files[sha] = bad
			case "wrong hash decoded":
				r.rel.Artifacts[0].SHA256 = strings.Repeat("ab", 32)
			case "decodes to more than declared":
				r.rel.Artifacts[0].Size -= 10
			case "firmware without a driver":
				r.rel.Kind = protocol.ReleaseFirmware
				r.rel.Artifacts = r.rel.Artifacts[1:2]
				r.rel.Artifacts[0].Arch = ""
			}
			o := r.order(t, 3)
			if c.name == "wrong signature" {
				r.key = testKey(2)
				o = r.order(t, 3)
			}
			u := newUpdater(dir, running, hub)
			u.o.Restart = func() { t.Fatal("restarted after a refused order") }
			install(u, o)
			s := hub.last()
			if s.Phase != protocol.UpdateFailed || !strings.Contains(s.Reason, c.reason) || s.Order != 3 {
				t.Fatalf("report %+v; want Failed with a reason containing %q", s, c.reason)
			}
			assertNoCurrent(t, dir)
			assertClean(t, dir)
		})
	}
}

// assertClean checks an order that failed left no slot and no download.
func assertClean(t *testing.T, dir string) {
	t.Helper()
	for _, sub := range []string{"slots", "download"} {
		entries, _ := os.ReadDir(filepath.Join(dir, "agent", sub))
		for _, e := range entries {
			inner, _ := os.ReadDir(filepath.Join(dir, "agent", sub, e.Name()))
			if sub == "slots" || len(inner) > 0 {
				t.Fatalf("left behind: %s/%s %v", sub, e.Name(), inner)
			}
		}
	}
}

// A downgrade the order allows is installed; the version already running
// is Committed at once, without a download.
func TestDowngradeAllowedAndSameVersion(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	r := newRelease(t, hub, "v1.3.0", "arm64", 8<<10, 9)
	u := newUpdater(dir, "v1.3.0", hub)
	install(u, r.order(t, 1))
	if s := hub.last(); s.Phase != protocol.UpdateCommitted || hub.downloads != 0 {
		t.Fatalf("report %+v after %d downloads; want Committed at once", s, hub.downloads)
	}
	u = newUpdater(dir, "dev", hub)
	o := r.order(t, 2)
	o.AllowDowngrade = true
	install(u, o)
	if s := hub.last(); s.Phase != protocol.UpdateRestarting {
		t.Fatalf("report %+v; want the allowed downgrade installed", s)
	}
	assertCurrentIs(t, dir, r, StateTrial)
}

// The disk fills: before the download (statfs) and during it (ENOSPC);
// both refused with the reason, the partial files removed. A small tmpfs
// is the disk.
func TestDiskFull(t *testing.T) {
	prereq.Root(t, "mounting a tmpfs")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		prereq.Missing(t, "tmpfs mount: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the test tmpfs %s: %v", dir, err)
		}
	})
	hub := &fakeHub{}

	big := newRelease(t, hub, "v1.3.0", "arm64", 8<<20, 1)
	u := newUpdater(dir, "v1.2.0", hub)
	install(u, big.order(t, 1))
	if s := hub.last(); s.Phase != protocol.UpdateFailed || !strings.Contains(s.Reason, "disk full in") || !strings.Contains(s.Reason, "needs") {
		t.Fatalf("report %+v; want Failed: disk full before the download", s)
	}
	assertNoCurrent(t, dir)
	assertClean(t, dir)

	// It fits when checked, then something else fills the disk.
	small := newRelease(t, hub, "v1.3.1", "arm64", 256<<10, 2)
	filler := filepath.Join(dir, "filler")
	crashPoint = func(step string) {
		if step == "download" {
			f, _ := os.Create(filler)
			buf := make([]byte, 64<<10)
			for {
				if _, err := f.Write(buf); err != nil {
					break
				}
			}
			f.Close()
		}
	}
	t.Cleanup(func() { crashPoint = func(string) {} })
	install(u, small.order(t, 2))
	if s := hub.last(); s.Phase != protocol.UpdateFailed || !strings.Contains(s.Reason, "disk full in") || !strings.Contains(s.Reason, "no space left") {
		t.Fatalf("report %+v; want Failed: disk full during the download", s)
	}
	assertNoCurrent(t, dir)
	assertClean(t, dir)
	os.Remove(filler)
}

type fakeDriver struct {
	got string
	err error
}

func (d *fakeDriver) Install(ctx context.Context, path string, progress func(int, string)) error {
	d.got = path
	if _, err := os.Stat(path); err != nil {
		return err
	}
	progress(40, "writing")
	progress(100, "done")
	return d.err
}

// A firmware order: the bundle is downloaded and verified like an agent's,
// handed to the driver with its progress reported, and the device reboots.
func TestFirmware(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("driver fails=", fail), func(t *testing.T) {
			dir := t.TempDir()
			hub := &fakeHub{}
			r := newRelease(t, hub, "2026.11.1", "", 16<<10, 4)
			r.rel.Kind, r.rel.Name = protocol.ReleaseFirmware, "os-bundle"
			r.rel.Artifacts = r.rel.Artifacts[:1] // gzip-encoded
			r.rel.Artifacts[0].Name = "update.raucb"
			drv := &fakeDriver{}
			if fail {
				drv.err = errors.New("rauc: signature of bundle does not verify")
			}
			rebooted := 0
			u := newUpdater(dir, "v1.2.0", hub)
			u.o.Driver, u.o.Reboot = drv, func() error { rebooted++; return nil }
			install(u, r.order(t, 4))
			var phases []string
			for _, s := range hub.reports {
				if s.Phase == protocol.UpdateInstalling {
					phases = append(phases, fmt.Sprint(s.Percent))
				}
			}
			if strings.Join(phases, ",") != "0,40,100" {
				t.Fatalf("Installing reports at %v; want 0,40,100", phases)
			}
			s := hub.last()
			if fail {
				if s.Phase != protocol.UpdateFailed || !strings.Contains(s.Reason, "installing update.raucb: rauc: signature") || rebooted != 0 {
					t.Fatalf("report %+v, %d reboots; want Failed with the driver's error", s, rebooted)
				}
			} else if s.Phase != protocol.UpdateRestarting || s.Kind != protocol.ReleaseFirmware || rebooted != 1 {
				t.Fatalf("report %+v, %d reboots; want Restarting and one reboot", s, rebooted)
			}
			if !strings.HasSuffix(drv.got, "/update.raucb") {
				t.Fatalf("driver got %q", drv.got)
			}
			assertClean(t, dir)
		})
	}
}

// Orders queue one deep and the newest wins.
func TestNewestOrderWins(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	u := newUpdater(dir, "v1.2.0", hub)
	r13 := newRelease(t, hub, "v1.3.0", "arm64", 8<<10, 1)
	r14 := newRelease(t, hub, "v1.4.0", "arm64", 8<<10, 2)
	u.Order(t.Context(), r13.order(t, 1))
	u.Order(t.Context(), r14.order(t, 2))
	u.Order(t.Context(), r13.order(t, 1)) // older: ignored
	restarted := make(chan struct{})
	u.o.Restart = func() { close(restarted) }
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go u.Run(ctx)
	<-restarted // waits for the install of the newest order
	assertCurrentIs(t, dir, r14, StateTrial)
	for _, s := range hub.reports {
		if s.Order == 1 {
			t.Fatalf("order 1 was acted on: %+v", s)
		}
	}
}

// A newer order cancels an install still downloading; the newest is
// installed, and what the cancelled one fetched is removed.
func TestNewerOrderCancelsAnInstall(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	u := newUpdater(dir, "v1.2.0", hub)
	r13 := newRelease(t, hub, "v1.3.0", "arm64", 64<<10, 1)
	r14 := newRelease(t, hub, "v1.4.0", "arm64", 64<<10, 2)
	sent := false
	crashPoint = func(step string) {
		if step == "download" && !sent {
			sent = true // mid-download of order 1, on the updater's goroutine
			u.Order(t.Context(), r14.order(t, 2))
		}
	}
	t.Cleanup(func() { crashPoint = func(string) {} })
	restarted := make(chan struct{})
	u.o.Restart = func() { close(restarted) }
	u.Order(t.Context(), r13.order(t, 1))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go u.Run(ctx)
	<-restarted // waits for the install of order 2
	assertCurrentIs(t, dir, r14, StateTrial)
	var first protocol.UpdateState
	for _, s := range hub.reports {
		if s.Order == 1 {
			first = s
		}
	}
	if first.Phase != protocol.UpdateFailed || !strings.Contains(first.Reason, "superseded") {
		t.Fatalf("order 1 ended %+v; want Failed, superseded", first)
	}
	if _, err := os.Stat(filepath.Join(dir, "agent", "download", "1")); !os.IsNotExist(err) {
		t.Fatalf("order 1's download is left: %v", err)
	}
}

// After the reboot into a firmware bundle, the health gate's verdict is
// reported for the order that restarted the device, once.
func TestFirmwareSettled(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprint("committed=", committed), func(t *testing.T) {
			dir := t.TempDir()
			hub := &fakeHub{}
			r := newRelease(t, hub, "2026.11.1", "", 16<<10, 4)
			r.rel.Kind, r.rel.Name = protocol.ReleaseFirmware, "os-bundle"
			r.rel.Artifacts = r.rel.Artifacts[:1]
			r.rel.Artifacts[0].Name = "update.raucb"
			u := newUpdater(dir, "v1.2.0", hub)
			u.o.Driver = &fakeDriver{}
			install(u, r.order(t, 9))

			after := newUpdater(dir, "v1.2.0", hub) // the device rebooted
			reason := ""
			if !committed {
				reason = "health check of the new system rootfs.1 failed: not healthy within the 5m0s commit deadline"
			}
			after.FirmwareSettled(committed, "rootfs.1", reason)
			s := hub.last()
			want := protocol.UpdateCommitted
			if !committed {
				want = protocol.UpdateRolledBack
			}
			if s.Order != 9 || s.Kind != protocol.ReleaseFirmware || s.Phase != want || s.Reason != reason || s.Running != "rootfs.1" {
				t.Fatalf("report %+v; want %s of order 9 with the reason", s, want)
			}
			n := len(hub.reports)
			after.FirmwareSettled(true, "rootfs.1", "")
			if len(hub.reports) != n {
				t.Fatal("reported again after the order was settled")
			}
		})
	}
}

// A daemon that stops mid-download reports no failure and keeps what it
// downloaded: the order comes again at the next start and resumes.
func TestStopKeepsTheDownload(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	u := newUpdater(dir, "v1.2.0", hub)
	r := newRelease(t, hub, "v1.3.0", "arm64", 64<<10, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	crashPoint = func(step string) {
		if step == "download" {
			cancel() // SIGTERM: the daemon's context ends
		}
	}
	t.Cleanup(func() { crashPoint = func(string) {} })
	u.Order(ctx, r.order(t, 1))
	u.Run(ctx) // returns once the order gave up
	for _, s := range hub.reports {
		if s.Phase == protocol.UpdateFailed {
			t.Fatalf("reported %+v on a stop", s)
		}
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "agent", "download", "1", "*.part"))
	if len(parts) != 1 {
		t.Fatalf("downloads kept: %v; want the partial one", parts)
	}
	crashPoint = func(string) {}
	hub.sent = 0
	install(newUpdater(dir, "v1.2.0", hub), r.order(t, 1))
	assertCurrentIs(t, dir, r, StateTrial)
	if total := r.rel.Artifacts[0].WireSize + r.rel.Artifacts[1].Size; hub.sent >= total {
		t.Fatalf("%d of %d bytes sent again; want the download resumed", hub.sent, total)
	}
}

// state.json's last order is a hub's: a device enrolled with another hub
// (a new hub key, order IDs from 1 again) must not take that hub's
// orders for ones it carried out already and drop them without a word.
// (sync/uplink keeps its newest order per hub key for the same reason.)
func TestOrdersOfANewHubAreNotTakenForOldOnes(t *testing.T) {
	dir := t.TempDir()
	hub := &fakeHub{}
	u := newUpdater(dir, "v1.2.0", hub)
	u.o.HubKeyID = "old-hub"
	u.report(protocol.UpdateState{Order: 57, Kind: protocol.ReleaseAgent, Version: "v1.2.0", Phase: protocol.UpdateCommitted, Percent: 100})

	u = newUpdater(dir, "v1.2.0", hub)
	u.o.HubKeyID = "new-hub"
	r13 := newRelease(t, hub, "v1.3.0", "arm64", 64<<10, 1)
	install(u, r13.order(t, 1))
	if s := hub.last(); s.Order != 1 || s.Phase != protocol.UpdateRestarting {
		t.Fatalf("the new hub's order 1 after order 57 of the old hub: last report %+v; want it carried out", s)
	}
	assertCurrentIs(t, dir, r13, StateTrial)

	// The new hub's order sent again is still carried out once.
	n := len(hub.reports)
	install(u, r13.order(t, 1))
	if s := hub.last(); len(hub.reports) != n+1 || s.Order != 1 || s.Phase != protocol.UpdateRestarting {
		t.Fatalf("order 1 sent again: %d reports, last %+v; want Restarting repeated", len(hub.reports)-n, s)
	}
}
