package containerd

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

type secrets map[string]*objects.Object

func (s secrets) Get(r objects.Ref) (*objects.Object, error) {
	if o, ok := s[r.Name]; ok && r.Namespace == "team" {
		return o, nil
	}
	return nil, &objects.NotFoundError{Ref: r}
}

func dockerSecret(name, data string) *objects.Object {
	return &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Namespace: "team", Name: name},
		Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(data)}}
}

func pullPod(names ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}}
	for _, n := range names {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, v1.LocalObjectReference{Name: n})
	}
	return pod
}

// The plugin gets the pod's logins for the image's registry, in order;
// secrets that cannot be read give the kubelet's warning and the pull
// goes on; a malformed secret fails the pull, naming it.
func TestPullAuth(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("fleet:s3cret"))
	get := secrets{
		"reg":   dockerSecret("reg", `{"auths": {"registry.example:5000": {"auth": "`+auth+`"}}}`),
		"other": dockerSecret("other", `{"auths": {"other.example": {"username": "o", "password": "p"}}}`),
		"bad":   dockerSecret("bad", `{"auths": nope}`),
	}
	const image = "registry.example:5000/team/app:1"

	got, events := pullAuth(pullPod("other", "gone", "reg"), get, image)
	want := pluginapi.PullAuth{Credentials: []pluginapi.Credential{{Username: "fleet", Password: "s3cret"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pull auth %d credentials, error %q; want fleet's", len(got.Credentials), got.Error)
	}
	wantEvents := []runtime.Event{{Type: "Warning", Reason: "FailedToRetrieveImagePullSecret",
		Message: "Unable to retrieve some image pull secrets (gone); attempting to pull the image may not succeed."}}
	if !reflect.DeepEqual(events, wantEvents) {
		t.Fatalf("events %+v, want %+v", events, wantEvents)
	}

	if got, events := pullAuth(pullPod("other"), get, image); len(got.Credentials) != 0 || got.Error != "" || events != nil {
		t.Fatalf("no matching login: %d credentials, error %q, events %v; want an anonymous pull", len(got.Credentials), got.Error, events)
	}
	if got, events := pullAuth(pullPod(), nil, image); !reflect.DeepEqual(got, pluginapi.PullAuth{}) || events != nil {
		t.Fatal("a pod without pull secrets has logins or events")
	}
	if _, events := pullAuth(pullPod("reg"), nil, image); len(events) != 1 || !strings.Contains(events[0].Message, "(reg)") {
		t.Fatalf("without a getter every pull secret is missing: %+v", events)
	}
	got, _ = pullAuth(pullPod("reg", "bad"), get, image)
	if len(got.Credentials) != 0 || !strings.HasPrefix(got.Error, `image pull secret "bad": .dockerconfigjson: invalid JSON at offset`) || strings.Contains(got.Error, "nope") || strings.Contains(got.Error, "'n'") {
		t.Fatalf("a malformed secret: error %q", got.Error)
	}
}

// The warning is reported with the start's outcome, before it.
func TestWithEvents(t *testing.T) {
	var got runtime.Started
	e := runtime.Event{Type: "Warning", Reason: "R", Message: "m"}
	withEvents(func(s runtime.Started) { got = s }, []runtime.Event{e})(runtime.Started{Events: []runtime.Event{{Reason: "later"}}})
	if len(got.Events) != 2 || got.Events[0] != e || got.Events[1].Reason != "later" {
		t.Fatalf("events %+v", got.Events)
	}
}

// pendingSecrets are secrets with some on their way from the hub.
type pendingSecrets struct {
	secrets
	pending map[string]bool
}

func (p pendingSecrets) Get(r objects.Ref) (*objects.Object, error) {
	if p.pending[r.Name] {
		return nil, &objects.PendingError{Ref: r}
	}
	return p.secrets.Get(r)
}

// A pull secret still on its way from the hub holds the start back,
// quietly (ObjectsPending, no FailedToRetrieveImagePullSecret, no pull
// without its login); a missing one does not.
func TestPullWaitsForAPendingSecret(t *testing.T) {
	get := pendingSecrets{secrets{"reg": dockerSecret("reg", `{"auths": {}}`)}, map[string]bool{"late": true}}
	if err := pendingPullSecret(pullPod("reg", "gone"), get); err != nil {
		t.Fatalf("found and missing secrets: %v", err)
	}
	if err := pendingPullSecret(pullPod("reg", "late"), nil); err != nil {
		t.Fatalf("no getter: %v", err)
	}
	err := pendingPullSecret(pullPod("reg", "gone", "late"), get)
	if !errors.Is(err, objects.ErrPending) || err.Error() != `secret "late" not yet received from the hub` {
		t.Fatalf("a pending secret: %v", err)
	}

	r := New(Config{}, t.TempDir(), runtime.Cgroups{}, nil)
	pod := pullPod("late")
	pod.UID = "uid-a"
	pod.Spec.Containers = []v1.Container{{Name: "app", Image: "registry.example:5000/team/app:1"}}
	var got runtime.Started
	r.Start(&runtime.Container{Pod: pod, Spec: &pod.Spec.Containers[0], InstanceID: "uid-a_app_1",
		Node: runtime.PodEnv{Objects: get}}, func(s runtime.Started) { got = s })
	var ce *runtime.CreateError
	if !errors.As(got.Err, &ce) || ce.Reason != runtime.ObjectsPending || len(got.Events) != 0 {
		t.Fatalf("start with a pending pull secret: %+v (%v), want ObjectsPending and no event", got, got.Err)
	}
}
