package objectlink

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
)

// store is a map of objects, a nil answer for a missing one.
type store map[objects.Ref]*objects.Object

func (s store) get(r objects.Ref) *objects.Object { return s[r] }

func (s store) put(kind objects.Kind, ns, name, rv string, size int) {
	r := objects.Ref{Kind: kind, Namespace: ns, Name: name}
	s[r] = &objects.Object{Ref: r, UID: "uid-" + ns + "-" + name, ResourceVersion: rv,
		Data: map[string][]byte{"k": []byte(strings.Repeat("x", size))}}
}

func pod(ns, name string, cms, secrets []string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, c := range cms {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
			ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: c}}}})
	}
	env := []v1.EnvVar{}
	for _, s := range secrets {
		env = append(env, v1.EnvVar{Name: "X", ValueFrom: &v1.EnvVarSource{
			SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: s}, Key: "k"}}})
	}
	p.Spec.Containers = []v1.Container{{Name: "app", Env: env}}
	return p
}

func keys(es []protocol.ObjectEntry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key()+"@"+e.ResourceVersion)
	}
	return strings.Join(out, " ")
}

func TestComputeTakesWhatThePodsReferenceAndExists(t *testing.T) {
	s := store{}
	s.put(objects.ConfigMap, "default", "app", "1", 10)
	s.put(objects.Secret, "default", "db", "2", 10)
	s.put(objects.ConfigMap, "edge", "app", "3", 10) // same name, the other pod's namespace
	s.put(objects.ConfigMap, "default", "unused", "4", 10)
	s.put(objects.Secret, "default", "app", "5", 10) // a Secret named as the ConfigMap: another object

	pods := []*v1.Pod{
		pod("default", "web", []string{"app", "missing"}, []string{"db"}),
		pod("edge", "gw", []string{"app"}, nil),
		pod("default", "web2", []string{"app"}, []string{"db"}), // the same objects again: once each
	}
	refs := PodRefs(pods)
	ix := Compute(refs, s.get, DefaultLimits)
	if got, want := keys(ix.Entries), "ConfigMap/default/app@1 ConfigMap/edge/app@3 Secret/default/db@2"; got != want {
		t.Fatalf("entries %s, want %s", got, want)
	}
	if fmt.Sprint(refs) != "[ConfigMap default/app ConfigMap default/missing Secret default/db ConfigMap edge/app]" {
		t.Fatalf("refs %v: want every object referenced, existing or not, once", refs)
	}
	if len(ix.Omitted) != 0 {
		t.Fatalf("omitted %v", ix.Omitted)
	}
	if refs := PodRefs(nil); len(refs) != 0 {
		t.Fatalf("no pods: %v", refs)
	}
}

func TestComputeFollowsChanges(t *testing.T) {
	s := store{}
	s.put(objects.ConfigMap, "default", "app", "1", 10)
	pods := PodRefs([]*v1.Pod{pod("default", "web", []string{"app"}, nil)})
	before := Compute(pods, s.get, DefaultLimits)

	s.put(objects.ConfigMap, "default", "app", "2", 10)
	after := Compute(pods, s.get, DefaultLimits)
	if SameEntries(before.Entries, after.Entries) {
		t.Fatal("a new resourceVersion left the entries the same")
	}
	if !SameEntries(after.Entries, Compute(pods, s.get, DefaultLimits).Entries) {
		t.Fatal("the same objects gave other entries")
	}
	delete(s, objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: "app"})
	if ix := Compute(pods, s.get, DefaultLimits); len(ix.Entries) != 0 || len(pods) != 1 {
		t.Fatalf("deleted object: %+v, want no entry", ix)
	}
	s.put(objects.ConfigMap, "default", "app", "3", 10)
	if ix := Compute(nil, s.get, DefaultLimits); len(ix.Entries) != 0 {
		t.Fatalf("the last pod gone: %+v", ix)
	}
	imm := &objects.Object{Ref: objects.Ref{Kind: objects.Secret, Namespace: "default", Name: "x"}, UID: "u", ResourceVersion: "1", Immutable: true}
	if e := Entry(imm); !e.Immutable || e.Kind != "Secret" {
		t.Fatalf("entry %+v", e)
	}
}

func TestComputeBounds(t *testing.T) {
	s := store{}
	var names []string
	for i := range 5 {
		n := fmt.Sprintf("cm-%d", i)
		names = append(names, n)
		s.put(objects.ConfigMap, "default", n, "1", 100-len("k"))
	}
	// Two pods, named so that b-pod is taken after a-pod whatever the
	// order given.
	pods := PodRefs([]*v1.Pod{pod("default", "b-pod", names[3:], nil), pod("default", "a-pod", names[:3], nil)})

	ix := Compute(pods, s.get, Limits{MaxObjects: 2, MaxBytes: 1 << 20})
	if got := keys(ix.Entries); got != "ConfigMap/default/cm-0@1 ConfigMap/default/cm-1@1" {
		t.Fatalf("count bound: entries %s", got)
	}
	if len(ix.Omitted) != 3 || !strings.Contains(ix.Omitted[0], "ConfigMap default/cm-2: over the device's limit of 2 objects") {
		t.Fatalf("count bound: omitted %q", ix.Omitted)
	}
	ix = Compute(pods, s.get, Limits{MaxObjects: 100, MaxBytes: 350})
	if got := keys(ix.Entries); got != "ConfigMap/default/cm-0@1 ConfigMap/default/cm-1@1 ConfigMap/default/cm-2@1" {
		t.Fatalf("byte bound: entries %s", got)
	}
	if len(ix.Omitted) != 2 || !strings.Contains(ix.Omitted[0], "cm-3: 100 bytes, over the device's limit of 350 bytes") {
		t.Fatalf("byte bound: omitted %q", ix.Omitted)
	}
	// A small object after a large one left out still fits.
	s.put(objects.ConfigMap, "default", "cm-3", "2", 1000)
	ix = Compute(pods, s.get, Limits{MaxObjects: 100, MaxBytes: 400})
	if got := keys(ix.Entries); !strings.Contains(got, "cm-4") || strings.Contains(got, "cm-3") {
		t.Fatalf("entries %s: want cm-4 in, cm-3 out", got)
	}
}
