package podfs

import (
	"errors"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/test/prereq"
)

// pendingObjects is fakeObjects with some refs pending (on their way
// from the hub).
type pendingObjects struct {
	*fakeObjects
	pending map[objects.Ref]bool
}

func (p pendingObjects) Get(r objects.Ref) (*objects.Object, error) {
	if p.pending[r] {
		return nil, &objects.PendingError{Ref: r}
	}
	return p.fakeObjects.Get(r)
}

var appRef = objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"}

// A volume whose object is pending waits for it (optional or not: the
// object exists), as ObjectsPending, not FailedMount; in a projected
// volume, the kubelet's errors of the other sources win over it.
func TestPendingObjectPayload(t *testing.T) {
	get := pendingObjects{newFakeObjects(), map[objects.Ref]bool{appRef: true}}
	node := testNode
	node.Objects = get
	pod := testPod(nil, nil)
	for _, optional := range []*bool{nil, yes()} {
		v := v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Optional: optional}}}
		if _, err := volumePayload(pod, v, node); !errors.Is(err, objects.ErrPending) {
			t.Fatalf("optional %v: %v, want pending", optional != nil, err)
		}
	}
	err := error(&runtime.MountError{Volume: "cfg", Err: &objects.PendingError{Ref: appRef}})
	if ce := runtime.ConfigError(err); ce.Reason != runtime.ObjectsPending {
		t.Fatalf("ConfigError %+v, want ObjectsPending", ce)
	}
	proj := &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
	}}
	if _, err := projectedPayload(pod, proj, node); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("projected, pending only: %v", err)
	}
	proj.Sources = append(proj.Sources, v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}}})
	if _, err := projectedPayload(pod, proj, node); errors.Is(err, objects.ErrPending) || err == nil || err.Error() != `secret "gone" not found` {
		t.Fatalf("projected, pending and missing: %v", err)
	}
}

// A pod's first start waits for a pending object with no volume set up;
// a volume set up before keeps its files quietly while a new version of
// its object is pending, and takes it when it comes.
func TestPendingObjectVolume(t *testing.T) {
	prereq.Root(t, "mounting tmpfs")
	fs := newTestFS(t)
	get := pendingObjects{newFakeObjects(), map[objects.Ref]bool{appRef: true}}
	node := testNode
	node.Objects = get
	pod := testPod([]v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}}, []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}})
	c := &pod.Spec.Containers[0]
	t.Cleanup(func() { fs.RemovePod(pod.UID) })
	dir := filepath.Join(fs.podDir(pod.UID), "volumes", "cfg")

	_, err := fs.Mounts(pod, c, node, nil)
	if ce := runtime.ConfigError(err); !errors.Is(err, objects.ErrPending) || ce.Reason != runtime.ObjectsPending {
		t.Fatalf("first start: %v (%+v), want pending", err, ce)
	}
	if isMountPoint(dir) {
		t.Fatal("a volume set up for a pending object")
	}
	delete(get.pending, appRef)
	get.put(configMap("app", map[string]string{"conf": "v1"}))
	if _, err := fs.Mounts(pod, c, node, nil); err != nil {
		t.Fatal(err)
	}
	get.pending[appRef] = true // made again at the hub, on its way
	if changed, err := fs.RefreshObjectVolumes(pod, node); changed || err != nil {
		t.Fatalf("refresh while pending: %v %v, want nothing", changed, err)
	}
	if _, err := fs.Mounts(pod, c, node, nil); err != nil {
		t.Fatalf("a restart while pending, with the volume set up: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "conf")); got != "v1" {
		t.Fatalf("conf %q while pending", got)
	}
	delete(get.pending, appRef)
	get.put(configMap("app", map[string]string{"conf": "v2"}))
	if changed, err := fs.RefreshObjectVolumes(pod, node); !changed || err != nil {
		t.Fatalf("refresh when it came: %v %v", changed, err)
	}
	if got := readFile(t, filepath.Join(dir, "conf")); got != "v2" {
		t.Fatalf("conf %q after it came", got)
	}
}
