package containerd

import (
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// A finished container's removal waits for its pod's start in flight (the
// restart it made way for), not for another pod's, nor for its own.
func TestRemovalWaitsForItsPodsStart(t *testing.T) {
	r := New(Config{}, t.TempDir(), runtime.Cgroups{}, nil)
	restart := r.runStarted("uid-a_app_2")
	other := r.runStarted("uid-b_app_1")
	defer other()

	starts := r.podStarts("uid-a_app_1")
	if len(starts) != 1 {
		t.Fatalf("the removal of uid-a_app_1 waits for %d starts, want 1: uid-a_app_2's", len(starts))
	}
	for _, id := range []string{"uid-a_app_2", "uid-c_app_1", "not-an-instance"} {
		if n := len(r.podStarts(id)); n != 0 {
			t.Errorf("the removal of %s waits for %d starts, want none (no other start of its pod in flight)", id, n)
		}
	}
	select {
	case <-starts[0]:
		t.Fatal("uid-a_app_2's start counts as done while in flight")
	default:
	}
	restart()
	<-starts[0] // done: the removal goes on
	r.awaitPodStarts("uid-a_app_1")
	if n := len(r.podStarts("uid-a_app_1")); n != 0 {
		t.Fatalf("uid-a_app_2's start is still in flight after it was done (%d)", n)
	}
}
