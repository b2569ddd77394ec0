package podobjects

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
)

func cm(name, rv string) *objects.Object {
	return &objects.Object{Ref: objects.Ref{Kind: objects.ConfigMap, Namespace: "default", Name: name}, UID: "u-" + name, ResourceVersion: rv}
}

func podFrom(source string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Annotations: map[string]string{manifest.AnnotationSource: source}},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}}}}
}

type hubMap map[objects.Ref]*objects.Object

func (m hubMap) Get(r objects.Ref) (*objects.Object, error) {
	if o, ok := m[r]; ok {
		return o, nil
	}
	return nil, &objects.NotFoundError{Ref: r}
}

// A static pod sees the local objects only, a hub pod the hub's only
// (nothing before the uplink gives a source); a pod of no source nothing.
func TestForKeepsSourcesApart(t *testing.T) {
	s := New()
	s.SetLocal([]*objects.Object{cm("app", "1")})
	ref := cm("app", "").Ref
	file, hub := s.For(podFrom(manifest.SourceFile)), s.For(podFrom(manifest.SourceHub))
	if o, err := file.Get(ref); err != nil || o.ResourceVersion != "1" {
		t.Fatalf("file pod: %v %v", o, err)
	}
	if _, err := hub.Get(ref); !errors.Is(err, objects.ErrNotFound) || err.Error() != `configmap "app" not found` {
		t.Fatalf("hub pod before the uplink: %v", err)
	}
	s.SetHub(hubMap{ref: cm("app", "h")})
	if o, err := hub.Get(ref); err != nil || o.ResourceVersion != "h" {
		t.Fatalf("hub pod: %v %v", o, err)
	}
	if o, _ := file.Get(ref); o.ResourceVersion != "1" {
		t.Fatal("a file pod saw the hub's object")
	}
	if _, err := s.For(&v1.Pod{}).Get(ref); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("no source: %v", err)
	}
	// The getter reads the current objects: a retry sees what came since.
	s.SetLocal([]*objects.Object{cm("app", "2")})
	if o, _ := file.Get(ref); o.ResourceVersion != "2" {
		t.Fatal("the getter kept an old version")
	}
}

func TestSetLocalChanged(t *testing.T) {
	s := New()
	if got := s.SetLocal([]*objects.Object{cm("a", "1"), cm("b", "1")}); len(got) != 2 {
		t.Fatalf("added: %v", got)
	}
	got := s.SetLocal([]*objects.Object{cm("a", "1"), cm("c", "1"), cm("b", "2")})
	names := map[string]bool{}
	for _, r := range got {
		names[r.Name] = true
	}
	if len(got) != 2 || !names["b"] || !names["c"] {
		t.Fatalf("changed: %v", got)
	}
	if got := s.SetLocal([]*objects.Object{cm("c", "1"), cm("b", "2")}); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("removed: %v", got)
	}
	if !Uses(podFrom(manifest.SourceFile), []objects.Ref{cm("app", "").Ref}) || Uses(podFrom(manifest.SourceFile), got) {
		t.Fatal("Uses")
	}
}

func TestNoteAndTakeChanged(t *testing.T) {
	s := New()
	if refs, all := s.TakeChanged(); refs != nil || all {
		t.Fatalf("nothing noted: %v %v", refs, all)
	}
	s.Note([]objects.Ref{cm("a", "").Ref})
	s.Note([]objects.Ref{cm("a", "").Ref, cm("b", "").Ref})
	if refs, all := s.TakeChanged(); len(refs) != 2 || all {
		t.Fatalf("noted twice: %v %v", refs, all)
	}
	if refs, all := s.TakeChanged(); refs != nil || all {
		t.Fatal("taken twice")
	}
	s.SetHub(hubMap{})
	if _, all := s.TakeChanged(); !all {
		t.Fatal("a new hub source changes every object")
	}
}

// Overdue refs gather until taken, each once, sorted.
func TestOverdueTakenOnce(t *testing.T) {
	s := New()
	b, a := cm("b", "1").Ref, cm("a", "1").Ref
	s.NoteOverdue([]objects.Ref{b})
	s.NoteOverdue([]objects.Ref{a, b})
	if got := s.TakeOverdue(); len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("overdue %v, want a then b", got)
	}
	if got := s.TakeOverdue(); len(got) != 0 {
		t.Fatalf("taken again: %v", got)
	}
}
