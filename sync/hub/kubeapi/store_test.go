package kubeapi

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podObj(name string, restarts int32) *object {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c", RestartCount: restarts}}}}
	return &object{obj: p, fields: podFields(p)}
}

// Versions count from the start time in nanoseconds; only a changed
// object gets a new one; a removed one is DELETED with the next.
func TestStoreVersions(t *testing.T) {
	s := newStore(10, time.Unix(1000, 0))
	s.replace(resPods, "d", []*object{podObj("a", 0), podObj("b", 0)})
	s.replace(resPods, "d", []*object{podObj("a", 0), podObj("b", 1)})
	s.replace(resPods, "d", []*object{podObj("a", 0)})
	evs, err := s.since(resPods, 1000e9)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s %d", e.typ, e.obj.obj.GetName(), e.rv-1000e9))
	}
	if fmt.Sprint(got) != "[ADDED a 1 ADDED b 2 MODIFIED b 3 DELETED b 4]" {
		t.Errorf("events %v", got)
	}
	if o := s.get(resPods, "default", "a"); o.obj.GetResourceVersion() != "1000000000001" {
		t.Errorf("unchanged a has version %s", o.obj.GetResourceVersion())
	}
	// Another source's objects are its own: replacing d's leaves them.
	s.replace(resPods, "e", []*object{podObj("c", 0)})
	s.replace(resPods, "d", nil)
	if objs, _, _ := s.list(resPods, "", nil, nil, "", 0); len(objs) != 1 || objs[0].obj.GetName() != "c" {
		t.Errorf("after d left: %d objects", len(objs))
	}
}

// A watch that does not read is cut when its buffer is full, never
// waited on; the ring drops the oldest change and moves its floor.
func TestStoreCutsSlowWatcherAndExpires(t *testing.T) {
	s := newStore(4, time.Unix(1000, 0))
	w, _, _, _, err := s.watch(resPods, 1000e9, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= watchBuffer; i++ {
		s.replace(resPods, "d", []*object{podObj("a", int32(i))})
	}
	select {
	case <-w.gone:
	default:
		t.Fatal("a watcher that read nothing was not cut")
	}
	if _, err := s.since(resPods, 1000e9); err == nil {
		t.Error("a version older than the ring's floor was not expired")
	}
	if evs, err := s.since(resPods, s.current()-4); err != nil || len(evs) != 4 {
		t.Errorf("the ring's last 4: %d, %v", len(evs), err)
	}
	// Nodes have their own ring: their changes push no pod change out.
	for i := 0; i < 10; i++ {
		s.replace(resNodes, "d", []*object{nodeObject(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: int64(i)}})})
	}
	if evs, err := s.since(resPods, s.current()-14); err != nil || len(evs) != 4 {
		t.Errorf("pods after node changes: %d, %v", len(evs), err)
	}
}
