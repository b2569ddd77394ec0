package pressure

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/test/prereq"
)

func TestObserveReadsSignals(t *testing.T) {
	obs := Observer{FsPath: t.TempDir()}.Observe()
	for _, s := range []eviction.Signal{eviction.MemoryAvailable, eviction.NodeFsAvailable, eviction.NodeFsInodesFree, eviction.PIDAvailable} {
		o, ok := obs[s]
		if !ok || o.Capacity <= 0 || o.Available <= 0 || o.Available > o.Capacity {
			t.Errorf("%s = %+v (present %v)", s, o, ok)
		}
	}
}

func TestPSITriggerStopsWithItsContext(t *testing.T) {
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		prereq.Missing(t, "PSI: %v", err)
	}
	n := NewNotifier(slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	if err := n.PSI(ctx, 150*time.Millisecond, 2*time.Second, "/proc/pressure/memory"); err != nil {
		prereq.Missing(t, "PSI trigger: %v", err)
	}
	before := countFDs(t)
	cancel()
	// The watcher leaves its poll at once and closes its two descriptors.
	deadline := time.Now().Add(2 * time.Second)
	for countFDs(t) > before-2 {
		if time.Now().After(deadline) {
			t.Fatalf("the PSI watcher did not stop: %d descriptors, had %d", countFDs(t), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func countFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// A change of the watched file pokes at once: the kernel notifies a cgroup
// v2 memory.events change the same way a write to a file does.
func TestModifiedPokes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(file, []byte("oom_kill 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := NewNotifier(slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := n.Modified(ctx, file); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.C:
		t.Fatal("poked before any change")
	default:
	}
	if err := os.WriteFile(file, []byte("oom_kill 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.C:
	case <-time.After(5 * time.Second):
		t.Fatal("no poke after the file changed")
	}
	if err := n.Modified(ctx, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("watching a missing file succeeded")
	}
}

// Pokes that come before the reader add up to one wake that names them
// all; Take clears them.
func TestPokesAddUp(t *testing.T) {
	n := NewNotifier(slog.Default())
	n.Poke(WakePeriodic)
	n.Poke(WakeThreshold)
	<-n.C
	select {
	case <-n.C:
		t.Fatal("two wakes for two pokes before the reader")
	default:
	}
	if w := n.Take(); w != WakeThreshold|WakePeriodic || !w.Kernel() {
		t.Fatalf("Take = %v, want the threshold event and the periodic check", w)
	}
	if w := n.Take(); w != 0 {
		t.Fatalf("Take after Take = %v, want nothing", w)
	}
	if s := (WakeThreshold | WakePeriodic).String(); s != "memory threshold event and periodic check" {
		t.Fatalf("String = %q", s)
	}
	if WakePeriodic.Kernel() || (WakeRecheck | WakeStart).Kernel() {
		t.Fatal("the daemon's own timers count as a kernel event")
	}
}
