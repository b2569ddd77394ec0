package supervisor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// hubLike is a getter as the uplink's: an object pending until it is
// given (or given up: not found).
type hubLike struct {
	mu      sync.Mutex
	obj     *objects.Object
	givenUp bool
}

func (g *hubLike) Get(r objects.Ref) (*objects.Object, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.obj != nil && g.obj.Ref == r:
		return g.obj, nil
	case g.givenUp:
		return nil, &objects.NotFoundError{Ref: r}
	}
	return nil, &objects.PendingError{Ref: r}
}

func (g *hubLike) set(o *objects.Object, givenUp bool) {
	g.mu.Lock()
	g.obj, g.givenUp = o, givenUp
	g.mu.Unlock()
}

// hubEnvRuntime resolves each container's environment as the runtimes
// do, from the hub-like getter.
type hubEnvRuntime struct {
	*fakeRuntime
	get *hubLike
}

func (r hubEnvRuntime) Start(c *runtime.Container, done func(runtime.Started)) {
	r.mu.Lock()
	r.started = append(r.started, c.InstanceID)
	r.mu.Unlock()
	node := c.Node
	node.Objects = r.get
	if _, err := runtime.Resolve(c.Pod, c.Spec, node); err != nil {
		done(runtime.Started{Err: runtime.ConfigError(err)})
		return
	}
	done(runtime.Started{At: time.Now()})
}

var dbRef = objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "db"}

// A container whose env names a Secret still on its way from the hub
// waits in ContainerCreating with no event at all, and starts as soon
// as the Secret comes (HubObjectsChanged), not after a backoff.
func TestPendingEnvObjectWaitsQuietly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	get := &hubLike{}
	fake := hubEnvRuntime{newFakeRuntime(), get}
	d := shellDaemon(t, ctx, fake)
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return clock } // no recheck comes by itself
	st := desireWebPod(t, d, `  - {name: app, image: busybox, env: [{name: A, valueFrom: {secretKeyRef: {name: db, key: k}}}]}`)
	uid := st.Pods[0].UID
	state := func(n int, phase lifecycle.ContainerPhase, reason string) func() bool {
		return func() bool {
			started, _, _ := fake.snapshot()
			c := d.machine.Instance(uid).Container("app")
			return len(started) == n && c.Phase == phase && c.WaitReason == reason
		}
	}
	runUntil(t, d, "the start waits for the pending secret", state(1, lifecycle.Waiting, lifecycle.ObjectsPending))
	pods, _, _ := d.API().Pods()
	if w := pods[0].Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" || w.Message != "" {
		t.Fatalf("waiting state %+v, want ContainerCreating", w)
	}
	for _, e := range d.API().Events("default", "web") {
		if e.Type == "Warning" {
			t.Fatalf("a warning while the secret is on its way: %+v", e)
		}
	}
	clock = clock.Add(time.Millisecond)
	get.set(&objects.Object{Ref: dbRef, UID: "u", ResourceVersion: "1", Data: map[string][]byte{"k": []byte("v")}}, false)
	d.HubObjectsChanged([]objects.Ref{dbRef})
	runUntil(t, d, "the start tried again when the secret came", state(2, lifecycle.Running, ""))
	for _, e := range d.API().Events("default", "web") {
		if e.Type == "Warning" {
			t.Fatalf("a warning: %+v", e)
		}
	}
}

// A Secret that stays pending past the getter's bound: the hub pods
// using it say so (ObjectsNotReceived), and the start goes on as the
// kubelet's, with its CreateContainerConfigError.
func TestOverdueObjectSaysWhy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	get := &hubLike{}
	fake := hubEnvRuntime{newFakeRuntime(), get}
	d := shellDaemon(t, ctx, fake)
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return clock }
	st := desireWebPod(t, d, `  - {name: app, image: busybox, env: [{name: A, valueFrom: {secretKeyRef: {name: db, key: k}}}]}`)
	uid := st.Pods[0].UID
	waiting := func(n int, reason string) func() bool {
		return func() bool {
			started, _, _ := fake.snapshot()
			c := d.machine.Instance(uid).Container("app")
			return len(started) >= n && c.Phase == lifecycle.Waiting && c.WaitReason == reason
		}
	}
	runUntil(t, d, "the start waits for the pending secret", waiting(1, lifecycle.ObjectsPending))
	// As a hub pod: the event is for hub pods only.
	d.machine.Instance(uid).Pod.Annotations[manifest.AnnotationSource] = manifest.SourceHub
	clock = clock.Add(time.Millisecond) // the retry is the change's, not the recheck's
	get.set(nil, true)
	d.HubObjectsOverdue([]objects.Ref{dbRef})
	d.HubObjectsChanged([]objects.Ref{dbRef})
	runUntil(t, d, "the start goes on as the kubelet's", waiting(2, lifecycle.CreateContainerConfigError))
	var reasons []string
	for _, e := range d.API().Events("default", "web") {
		reasons = append(reasons, e.Reason)
		if e.Reason == ObjectsNotReceived && (e.Type != "Warning" || !strings.Contains(e.Message, `objects not yet received from the hub: secret "db"`)) {
			t.Fatalf("event %+v", e)
		}
	}
	if got := strings.Join(reasons, ","); !strings.HasPrefix(got, ObjectsNotReceived+",Failed") || strings.Count(got, ObjectsNotReceived) != 1 {
		t.Fatalf("events %s, want ObjectsNotReceived then the kubelet's Failed", got)
	}
}
