package process

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// A keeper instance that is locked but has no shim.json (the daemon went
// while the keeper was starting it) is the keeper's: a restarted daemon
// adopts it through the keeper, never reports it ended while its lock is
// held, and hears of its end.
func TestKeeperInstanceWithoutStateIsAdoptedNotEnded(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	s := e.keptSpec("sleep", "1000")
	e.start(s)
	keeperPid := state(t, e.rt, s.InstanceID).ShimPid
	if err := os.Remove(filepath.Join(e.rt.instanceDir(s.InstanceID), shim.StateFile)); err != nil {
		t.Fatal(err)
	}
	// The waits for a state file are added up, not slept: the keeper is
	// asked once they reach askKeepersAfter, long before they run out.
	var waited atomic.Int64
	adoptSleep = func(d time.Duration) { waited.Add(int64(d)) }
	t.Cleanup(func() { adoptSleep = time.Sleep })
	rt2, byID := e.restarted(true)
	if r := byID[s.InstanceID]; !r.Alive || r.Exit != nil {
		t.Fatalf("a locked instance its keeper runs was reported %+v", r)
	}
	if w := time.Duration(waited.Load()); w >= askKeepersAfter {
		t.Fatalf("adoption waited %v for a state file: the keeper was not asked after %v", w, askKeepersAfter)
	}
	if !lockHeld(t, rt2, s.InstanceID) || syscall.Kill(keeperPid, 0) != nil {
		t.Fatal("the instance must still run under its keeper")
	}
	if err := rt2.Kill(s.InstanceID); err != nil {
		t.Fatal(err)
	}
	select {
	case x := <-rt2.Exits():
		if x.InstanceID != s.InstanceID || x.ExitCode != 137 {
			t.Fatalf("exit = %+v", x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted instance's exit never arrived")
	}
}

// An exit the keeper reports for an instance nobody follows (a start
// that failed and was settled before its exit came) leaves nothing
// behind: one entry per failure would pile up for the keeper's life.
func TestKeeperLateExitOfAFailedStartIsNotKept(t *testing.T) {
	rt, err := New(filepath.Join(t.TempDir(), shim.InstancesDir), []string{"true"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	kc := &keeperConn{live: map[string]bool{"adoptable": true}, ended: map[string]bool{}}
	for i := 0; i < 3; i++ {
		rt.keeperExited(kc, "failed-start")
	}
	rt.keeperExited(kc, "adoptable")
	// An instance whose exit came is no longer live: adoptKept reports it
	// ended.
	if len(kc.ended) != 0 || len(kc.live) != 0 {
		t.Fatalf("exits of unfollowed instances kept: ended %v, live %v", kc.ended, kc.live)
	}
	rt.mu.Lock()
	rt.live["starting"] = &instance{id: "starting", keeper: kc, starting: true, pidfd: -1}
	rt.mu.Unlock()
	rt.keeperExited(kc, "starting")
	if !kc.ended["starting"] {
		t.Fatal("the exit of a start not answered yet was lost")
	}
}

// A keeper drained by a daemon of another version (a downgrade, then the
// upgrade again) serves its own version's daemon again: starts go through
// it at once instead of failing until its containers end.
func TestKeeperDrainedByAnotherVersionServesAgain(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	first := e.keptSpec("sleep", "1000")
	e.start(first)
	keeperPid := state(t, e.rt, first.InstanceID).ShimPid
	if _, err := e.rt.keepers.request(e.rt.keepers.socket, shim.KeeperRequest{Op: shim.KeeperDrain}); err != nil {
		t.Fatal(err)
	}
	rt2, _ := e.restarted(true)
	next := e.keptSpec("sleep", "1000")
	if _, err := rt2.StartPlaced(next, nil); err != nil {
		t.Fatalf("start after another version drained the keeper: %v", err)
	}
	if p := state(t, rt2, next.InstanceID).ShimPid; p != keeperPid {
		t.Fatalf("started through keeper %d, not the live one %d", p, keeperPid)
	}
	for _, id := range []string{first.InstanceID, next.InstanceID} {
		rt2.Kill(id)
	}
	for range 2 {
		select {
		case <-rt2.Exits():
		case <-time.After(10 * time.Second):
			t.Fatal("exits never arrived")
		}
	}
}

// A locked instance that neither a shim nor a keeper describes, and that
// nothing could kill, counts as running: reported ended, it could be
// started a second time beside itself. Its exit comes once the lock is
// free.
func TestLockedUndescribedInstanceIsNeverReportedEnded(t *testing.T) {
	e := newEnv(t)
	undescribedWait = 50 * time.Millisecond
	t.Cleanup(func() { undescribedWait = 10 * time.Second })
	s := e.spec("true")
	dir := e.rt.instanceDir(s.InstanceID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := shim.WriteJSONAtomic(filepath.Join(dir, shim.SpecFile), s); err != nil {
		t.Fatal(err)
	}
	holder, err := os.OpenFile(filepath.Join(dir, shim.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	rt2, byID := e.restarted(false)
	if r := byID[s.InstanceID]; !r.Alive || r.Exit != nil {
		t.Fatalf("an instance whose lock is held was reported %+v", r)
	}
	holder.Close()
	select {
	case x := <-rt2.Exits():
		if x.InstanceID != s.InstanceID {
			t.Fatalf("exit = %+v", x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit once the lock came free")
	}
}

// The lock and socket of a keeper version nobody runs any more are
// removed when a keeper is brought up, a live one's never; keeper.log
// past its bound is rotated.
func TestKeeperRemovesGoneVersionsAndRotatesItsLog(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	data := e.rt.keepers.dataDir()
	at := func(name string) string { return filepath.Join(data, name) }
	for _, name := range []string{"keeper-gone.lock", "keeper-gone.sock", "keeper-nolock.sock", "keeper-live.lock", "keeper-live.sock"} {
		if err := os.WriteFile(at(name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live, err := os.Open(at("keeper-live.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at("keeper.log"), make([]byte, keeperLogMax+1), 0o600); err != nil {
		t.Fatal(err)
	}
	s := e.keptSpec("true")
	e.start(s)
	e.exit(s.InstanceID)
	for _, name := range []string{"keeper-gone.lock", "keeper-gone.sock", "keeper-nolock.sock", "keeper-nolock.lock"} {
		if _, err := os.Stat(at(name)); err == nil {
			t.Errorf("%s of a gone keeper version is still there", name)
		}
	}
	for _, name := range []string{"keeper-live.lock", "keeper-live.sock", filepath.Base(e.rt.keepers.socket)} {
		if _, err := os.Stat(at(name)); err != nil {
			t.Errorf("a live keeper's %s was removed: %v", name, err)
		}
	}
	if st, err := os.Stat(at("keeper.log.1")); err != nil || st.Size() != keeperLogMax+1 {
		t.Fatalf("keeper.log past its bound not rotated: %v", err)
	}
	if st, err := os.Stat(at("keeper.log")); err != nil || st.Size() > keeperLogMax {
		t.Fatalf("keeper.log after rotation: %v", err)
	}
}
