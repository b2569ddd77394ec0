package schedule

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// rollingSet is a StatefulSet as apply defaults it: RollingUpdate with
// partition 0 and maxUnavailable, ten revisions kept.
func rollingSet(name string, replicas, maxUnavailable int32) *appsv1.StatefulSet {
	s := statefulSet(name, replicas, kv("app="+name))
	s.Generation = 1
	s.Spec.Template.Spec.Containers[0].Image = "v1"
	mu := intstr.FromInt32(maxUnavailable)
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: int32p(0), MaxUnavailable: &mu}}
	s.Spec.RevisionHistoryLimit = int32p(10)
	return s
}

func setRevision(s *appsv1.StatefulSet) string { return s.Name + "-" + TemplateHash(&s.Spec.Template) }

// A StatefulSet's status is computed in the pass: its counts as the
// devices report its pods, observedGeneration the generation the pass
// reconciled, currentRevision the update revision once every replica is
// updated and ready.
func TestStatefulSetStatusInThePass(t *testing.T) {
	db := rollingSet("db", 3, 1)
	s := newSim(t, Input{Now: t0, Devices: zoned(3), StatefulSets: []*appsv1.StatefulSet{db}})
	s.pass(0)
	if st := db.Status; st.Replicas != 3 || st.ReadyReplicas != 0 || st.ObservedGeneration != 1 {
		t.Fatalf("first pass: status %+v, want 3 replicas none ready, generation 1 observed", st)
	}
	s.pass(time.Second)
	v1rev := setRevision(db)
	if st := db.Status; st.ReadyReplicas != 3 || st.AvailableReplicas != 3 || st.UpdatedReplicas != 3 ||
		st.CurrentReplicas != 3 || st.CurrentRevision != v1rev || st.UpdateRevision != v1rev {
		t.Fatalf("status %+v, want 3 ready at %s", st, v1rev)
	}
	db.Spec.Template.Spec.Containers[0].Image = "v2"
	db.Generation = 2
	s.pass(time.Second)
	v2rev := setRevision(db)
	if st := db.Status; st.ObservedGeneration != 2 || st.UpdateRevision != v2rev || st.CurrentRevision != v1rev {
		t.Fatalf("mid-rollout status %+v, want generation 2, current %s, update %s", st, v1rev, v2rev)
	}
	for range 8 {
		s.pass(time.Second)
	}
	if st := db.Status; st.CurrentRevision != v2rev || st.UpdatedReplicas != 3 || st.CurrentReplicas != 3 {
		t.Fatalf("after the rollout: status %+v, want current revision %s", st, v2rev)
	}
	revs := s.in.Revisions[workloads.Index("StatefulSet", "default", "db")]
	if len(revs) != 2 || revs[0].Number != 1 || revs[1].Number != 2 || db.Name+"-"+revs[1].Hash != v2rev {
		t.Fatalf("revisions %+v, want 1 and 2 (%s)", revs, v2rev)
	}
}

// The failure threshold halts a StatefulSet's rolling update: no further
// ordinal is updated, the status says why; undo (the old template back)
// numbers the old revision newest again and updates the halted pods back.
func TestStatefulSetHaltsAtTheThreshold(t *testing.T) {
	db := rollingSet("db", 6, 2)
	db.Annotations = map[string]string{kinds.AnnotationFailureThreshold: "50%", kinds.AnnotationFailureMinimum: "2"}
	s := newSim(t, Input{Now: t0, Devices: zoned(6), StatefulSets: []*appsv1.StatefulSet{db}})
	s.pass(0)
	s.pass(time.Second)
	db.Spec.Template.Spec.Containers[0].Image = "crash"
	for range 10 {
		s.pass(time.Second)
	}
	crashing, _ := s.count("crash")
	old, _ := s.count("v1")
	if crashing != 2 || old != 4 {
		t.Fatalf("%d pods updated, %d old; want the rollout halted at 2 of 6", crashing, old)
	}
	halted := false
	for _, c := range db.Status.Conditions {
		halted = halted || c.Type == workloads.StatefulSetRolloutHalted && c.Reason == workloads.ReasonRolloutHalted
	}
	if !halted || db.Status.UpdatedReplicas != 2 {
		t.Fatalf("status %+v, want RolloutHalted with 2 updated", db.Status)
	}
	db.Spec.Template.Spec.Containers[0].Image = "v1"
	for range 8 {
		s.pass(time.Second)
	}
	if crashing, _ := s.count("crash"); crashing != 0 || db.Status.UpdatedReplicas != 6 || len(db.Status.Conditions) != 0 {
		t.Fatalf("after undo: %d crashing, status %+v", crashing, db.Status)
	}
	var numbers []string
	for _, r := range s.in.Revisions[workloads.Index("StatefulSet", "default", "db")] {
		numbers = append(numbers, fmt.Sprintf("%d:%t", r.Number, r.Halted != ""))
	}
	if fmt.Sprint(numbers) != "[2:true 3:false]" {
		t.Errorf("revisions %v, want the halted one 2 and v1 numbered 3 again", numbers)
	}
}

// Revisions no pod carries beyond revisionHistoryLimit go, oldest first.
func TestStatefulSetRevisionHistoryLimit(t *testing.T) {
	db := rollingSet("db", 2, 2)
	db.Spec.RevisionHistoryLimit = int32p(2)
	s := newSim(t, Input{Now: t0, Devices: zoned(2), StatefulSets: []*appsv1.StatefulSet{db}})
	for i := 1; i <= 5; i++ {
		db.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("v%d", i)
		for range 5 {
			s.pass(time.Second)
		}
	}
	var numbers []int64
	for _, r := range s.in.Revisions[workloads.Index("StatefulSet", "default", "db")] {
		numbers = append(numbers, r.Number)
	}
	if fmt.Sprint(numbers) != "[3 4 5]" {
		t.Fatalf("revisions %v, want the live one and 2 old: [3 4 5]", numbers)
	}
}
