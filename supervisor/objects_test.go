package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// resolvingRuntime makes each container's process as the runtimes do,
// and reports a failure the same way.
type resolvingRuntime struct{ *fakeRuntime }

func (r resolvingRuntime) Start(c *runtime.Container, done func(runtime.Started)) {
	r.mu.Lock()
	r.started = append(r.started, c.InstanceID)
	r.mu.Unlock()
	if _, err := runtime.Resolve(c.Pod, c.Spec, c.Node); err != nil {
		done(runtime.Started{Err: runtime.ConfigError(err)})
		return
	}
	done(runtime.Started{At: time.Now()})
}

// A static pod whose env names a missing ConfigMap waits with the
// kubelet's CreateContainerConfigError and Failed event; the manifest
// file that brings the object starts it at once, not at the end of its
// backoff. A hub pod never sees the manifest directory's objects.
func TestStaticPodWaitsForEnvObject(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := resolvingRuntime{newFakeRuntime()}
	d := shellDaemon(t, ctx, fake)
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return clock } // the backoff never ends by itself
	st := desireWebPod(t, d, `  - {name: app, image: busybox, envFrom: [{configMapRef: {name: app}}]}`)
	pod := st.Pods[0]
	starts := func(n int, phase lifecycle.ContainerPhase) func() bool {
		return func() bool {
			started, _, _ := fake.snapshot()
			return len(started) == n && d.machine.Instance(pod.UID).Container("app").Phase == phase
		}
	}
	runUntil(t, d, "the start fails for the missing configMap", starts(1, lifecycle.Waiting))
	pods, _, _ := d.API().Pods()
	if w := pods[0].Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || w.Message != `configmap "app" not found` {
		t.Fatalf("waiting state %+v", w)
	}
	failed := false
	for _, e := range d.API().Events("default", "web") {
		failed = failed || (e.Reason == "Failed" && e.Type == "Warning" && e.Message == `Error: configmap "app" not found`)
	}
	if !failed {
		t.Fatalf("no Failed event: %+v", d.API().Events("default", "web"))
	}

	clock = clock.Add(time.Millisecond) // well within the 10 s backoff
	objs := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {MODE: prod}\n"
	if err := os.WriteFile(filepath.Join(d.cfg.Manifests, "objects.yaml"), []byte(objs), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := d.desired.Dir().Load()
	if err != nil || len(st.Objects) != 1 {
		t.Fatalf("load: %v, %d objects", err, len(st.Objects))
	}
	d.setManifests(st)
	runUntil(t, d, "the start tried again when its object came", starts(2, lifecycle.Running))

	ref := objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"}
	if _, err := d.podEnv(pod).Objects.Get(ref); err != nil {
		t.Fatalf("the static pod does not see its manifest directory's object: %v", err)
	}
	hubPod := pod.DeepCopy()
	hubPod.Annotations[manifest.AnnotationSource] = manifest.SourceHub
	if _, err := d.podEnv(hubPod).Objects.Get(ref); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("a hub pod saw a local object: %v", err)
	}
}

// The hub's changes reach the loop without blocking the uplink, and the
// containers waiting for their configuration are tried again.
func TestHubObjectsChangedRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := resolvingRuntime{newFakeRuntime()}
	d := shellDaemon(t, ctx, fake)
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return clock }
	st := desireWebPod(t, d, `  - {name: app, image: busybox, env: [{name: A, valueFrom: {secretKeyRef: {name: db, key: k}}}]}`)
	uid := st.Pods[0].UID
	starts := func(n int) func() bool {
		return func() bool {
			started, _, _ := fake.snapshot()
			c := d.machine.Instance(uid).Container("app")
			return len(started) == n && c.Phase == lifecycle.Waiting && c.WaitMessage == `secret "db" not found`
		}
	}
	runUntil(t, d, "the start fails for the missing secret", starts(1))
	clock = clock.Add(time.Millisecond)
	d.HubObjectsChanged([]objects.Ref{{Kind: objects.Secret, Namespace: "default", Name: "db"}})
	runUntil(t, d, "the start tried again on the hub's change", starts(2))
	clock = clock.Add(time.Millisecond)
	d.SetHubObjects(nil)
	runUntil(t, d, "the start tried again on a new hub source", starts(3))
}
