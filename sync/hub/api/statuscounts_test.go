package api

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func owned(name, kind, owner, hash, device string) *v1.Pod {
	yes := true
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
		OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: owner, Controller: &yes}}}, Spec: v1.PodSpec{NodeName: device}}
	if hash != "" {
		p.Labels = map[string]string{"pod-template-hash": hash}
	}
	return p
}

// A ReplicaSet's pods count for their Deployment and for the ReplicaSet
// itself; terminating pods and pods without a controller do not count;
// bound pods count as ready.
func TestStatusCounts(t *testing.T) {
	deleted := owned("web-abc-3", "ReplicaSet", "web-abc", "abc", "d1")
	now := metav1.NewTime(time.Unix(1700000000, 0))
	deleted.DeletionTimestamp = &now
	pods := []*v1.Pod{
		owned("web-abc-1", "ReplicaSet", "web-abc", "abc", "d1"),
		owned("web-abc-2", "ReplicaSet", "web-abc", "abc", ""),
		owned("web-def-1", "ReplicaSet", "web-def", "def", "d2"),
		deleted,
		owned("agent-1", "DaemonSet", "agent", "", "d1"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bare"}},
	}
	got := statusCounts(pods)
	want := map[ownerKey]counts{
		{"ReplicaSet", "default", "web"}:        {all: 3, bound: 2},
		{replicaSetExact, "default", "web-abc"}: {all: 2, bound: 1},
		{replicaSetExact, "default", "web-def"}: {all: 1, bound: 1},
		{"DaemonSet", "default", "agent"}:       {all: 1, bound: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("%v: %+v, want %+v", k, got[k], c)
		}
	}
	// A ReplicaSet not named <deployment>-<hash> counts under its own name.
	if d := deploymentOf(owned("x", "ReplicaSet", "other", "abc", ""), "other"); d != "other" {
		t.Fatalf("deploymentOf: %q", d)
	}
}
