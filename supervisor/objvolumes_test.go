package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// mountingRuntime prepares each container's mounts as the containerd
// runtime does, and reports a failure the same way.
type mountingRuntime struct{ *fakeRuntime }

func (m mountingRuntime) Start(c *runtime.Container, done func(runtime.Started)) {
	m.mu.Lock()
	m.started = append(m.started, c.InstanceID)
	m.mu.Unlock()
	if _, err := c.Mounts(nil); err != nil {
		done(runtime.Started{Err: runtime.ConfigError(err)})
		return
	}
	done(runtime.Started{At: time.Now()})
}

// A pod whose configMap is missing waits in ContainerCreating with the
// kubelet's FailedMount warning, and ObjectsChanged tries it again at
// once, without waiting out the backoff.
func TestMissingConfigMapWaitsForObjects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := mountingRuntime{newFakeRuntime()}
	d := shellDaemon(t, ctx, fake)
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return clock } // the backoff never ends by itself
	st := desireWebPod(t, d, `  - {name: app, image: busybox, volumeMounts: [{name: cfg, mountPath: /cfg}]}
  volumes: [{name: cfg, configMap: {name: app}}]`)
	uid := st.Pods[0].UID
	t.Cleanup(func() { d.podFS.RemovePod(uid) })
	starts := func(n int) func() bool {
		return func() bool {
			started, _, _ := fake.snapshot()
			c := d.machine.Instance(uid).Container("app")
			return len(started) == n && c.Phase == lifecycle.Waiting && c.WaitReason == lifecycle.FailedMount
		}
	}
	runUntil(t, d, "the start fails for the missing configMap", starts(1))
	pods, _, _ := d.API().Pods()
	if w := pods[0].Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" || w.Message != "" {
		t.Fatalf("waiting state %+v, want ContainerCreating", w)
	}
	failedMounts := func() (n int) {
		t.Helper()
		for _, e := range d.API().Events("default", "web") {
			switch {
			case e.Reason == lifecycle.FailedMount && e.Type == "Warning" &&
				e.Message == `MountVolume.SetUp failed for volume "cfg" : configmap "app" not found`:
				n += e.Count
			case e.Reason == "Failed" || e.Reason == "BackOff":
				t.Errorf("event %+v: the kubelet says only FailedMount", e)
			}
		}
		return n
	}
	if n := failedMounts(); n != 1 {
		t.Fatalf("%d FailedMount warnings, want 1: %+v", n, d.API().Events("default", "web"))
	}

	clock = clock.Add(time.Millisecond) // still within the 500 ms backoff
	d.ObjectsChanged()
	d.ObjectsChanged() // coalesced
	runUntil(t, d, "the start is tried again when the objects change", starts(2))
	if n := failedMounts(); n != 2 {
		t.Fatalf("%d FailedMount warnings, want 2", n)
	}
}
