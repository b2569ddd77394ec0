package nodeprotect

import (
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

// fakeObserver reports the signals a test sets, counting the looks.
type fakeObserver struct {
	signals map[eviction.Signal]eviction.Observation
	looks   int
}

func (f *fakeObserver) Observe() map[eviction.Signal]eviction.Observation {
	f.looks++
	return f.signals
}

// memoryAvailable is a memory.available observation of a 1000-byte node.
func memoryAvailable(bytes int64) map[eviction.Signal]eviction.Observation {
	return map[eviction.Signal]eviction.Observation{eviction.MemoryAvailable: {Available: bytes, Capacity: 1000}}
}

// fakePods are pod instances a test makes live or gone at will.
type fakePods map[types.UID]*lifecycle.Instance

func (f fakePods) Instance(uid types.UID) *lifecycle.Instance { return f[uid] }

func (f fakePods) Instances() []*lifecycle.Instance {
	out := make([]*lifecycle.Instance, 0, len(f))
	for _, in := range f {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// add makes a running pod of the priority.
func (f fakePods) add(name string, prio int32) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)},
		Spec: v1.PodSpec{Priority: &prio, Containers: []v1.Container{{Name: "app"}}}}
	f[pod.UID] = &lifecycle.Instance{Pod: pod, Containers: []*lifecycle.Container{{Name: "app", Phase: lifecycle.Running}}}
}

// end makes a pod's processes gone.
func (f fakePods) end(names ...string) {
	for _, name := range names {
		f[types.UID(name)].Containers[0].Phase = lifecycle.Exited
	}
}

// testClock is the protector's clock, moved by the test alone.
type testClock struct{ at time.Time }

func (c *testClock) now() time.Time { return c.at }

// protector is a protector on a fake clock and observer, with o's other
// settings; it arms no kernel notification.
func protector(t *testing.T, o Options) (*Protector, *testClock, *fakeObserver) {
	t.Helper()
	clock := &testClock{at: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	obs := &fakeObserver{signals: memoryAvailable(900)}
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Now, o.Observer = clock.now, obs
	if o.Notifier == nil {
		o.Notifier = pressure.NewNotifier(o.Log)
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.ShutdownBuckets == nil {
		o.ShutdownBuckets = kubeletBuckets
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p, clock, obs
}

// kubeletBuckets are the config's default order: non-critical pods within
// 20 s, then critical ones within 10 s.
var kubeletBuckets = []ShutdownBucket{{Priority: 0, GracePeriod: 20 * time.Second}, {Priority: 2000000000, GracePeriod: 10 * time.Second}}
