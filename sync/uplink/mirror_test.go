package uplink

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

func statusPod(name string, phase v1.PodPhase) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Status: v1.PodStatus{Phase: phase}}
}

// describe renders items as "key:kind:phase" ("gone" for a deletion).
func describe(t *testing.T, items []store.Item) string {
	t.Helper()
	var out []string
	for _, it := range items {
		what := "gone"
		if len(it.Payload) > 0 {
			var p v1.Pod
			if err := json.Unmarshal(it.Payload, &p); err != nil {
				t.Fatalf("item %s: %v", it.Key, err)
			}
			what = string(p.Status.Phase)
		}
		out = append(out, it.Key+":"+it.Kind+":"+what)
	}
	return strings.Join(out, " ")
}

// The mirror gives the hub each pod's status when it changes, once; a
// pod gone as a deletion; and everything again after forget (the outbox
// refused a batch).
func TestMirrorChanges(t *testing.T) {
	var m mirror
	web, db := statusPod("web", v1.PodPending), statusPod("db", v1.PodRunning)
	steps := []struct {
		name string
		pods []*v1.Pod
		want string
	}{
		{"first view: every pod", []*v1.Pod{web, db}, "default/web:pod:Pending default/db:pod:Running"},
		{"the same objects again: nothing", []*v1.Pod{web, db}, ""},
		{"a new object with the same content: nothing", []*v1.Pod{statusPod("web", v1.PodPending), db}, ""},
		{"a changed status: that pod", []*v1.Pod{statusPod("web", v1.PodRunning), db}, "default/web:pod:Running"},
		{"a pod gone: its deletion", []*v1.Pod{statusPod("web", v1.PodRunning)}, "default/db:pod:gone"},
		{"two instances of a name: the later one counts",
			[]*v1.Pod{statusPod("web", v1.PodSucceeded), statusPod("web", v1.PodPending)}, "default/web:pod:Pending"},
		{"back again: the pod anew", []*v1.Pod{statusPod("web", v1.PodPending), statusPod("db", v1.PodRunning)}, "default/db:pod:Running"},
		{"everything gone, in name order", nil, "default/db:pod:gone default/web:pod:gone"},
	}
	for _, s := range steps {
		if got := describe(t, m.changes(s.pods)); got != s.want {
			t.Fatalf("%s: items %q, want %q", s.name, got, s.want)
		}
	}
	m.changes([]*v1.Pod{web, db})
	m.forget()
	if got := describe(t, m.changes([]*v1.Pod{web, db})); got != "default/web:pod:Pending default/db:pod:Running" {
		t.Fatalf("after forget: %q, want every pod again", got)
	}
}

// A restarted device starts from what the hub holds: an unchanged pod is
// not sent again, a changed one is, and one gone while the device was
// down is removed.
func TestMirrorSeededFromTheOutbox(t *testing.T) {
	held := func(p *v1.Pod) []byte {
		b, _ := json.Marshal(p)
		return b
	}
	var m mirror
	m.seed(map[string][]byte{
		"default/same":  held(statusPod("same", v1.PodRunning)),
		"default/moved": held(statusPod("moved", v1.PodPending)),
		"default/gone":  held(statusPod("gone", v1.PodRunning)),
	})
	got := describe(t, m.changes([]*v1.Pod{statusPod("same", v1.PodRunning), statusPod("moved", v1.PodRunning), statusPod("new", v1.PodPending)}))
	if want := "default/moved:pod:Running default/new:pod:Pending default/gone:pod:gone"; got != want {
		t.Fatalf("items %q, want %q", got, want)
	}
}

// A pod event goes to the outbox as the wire's event under its pod.
func TestEventItem(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	it := eventItem(supervisor.PodEvent{Pod: "default/web", Time: at, Type: "Warning", Reason: "BackOff", Message: "restarting"})
	var ev protocol.Event
	if err := json.Unmarshal(it.Payload, &ev); err != nil {
		t.Fatal(err)
	}
	if it.Key != "default/web" || it.Kind != store.KindEvent || !ev.Time.Equal(at) || ev.Type != "Warning" || ev.Reason != "BackOff" || ev.Message != "restarting" {
		t.Fatalf("item %+v event %+v", it, ev)
	}
}
