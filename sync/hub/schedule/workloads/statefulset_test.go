package workloads

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func sts(replicas int32, policy appsv1.PodManagementPolicyType) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db", UID: "u-db", Generation: 3}}
	s.Spec.Replicas = &replicas
	s.Spec.PodManagementPolicy = policy
	s.Spec.ServiceName = "db"
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	s.Spec.Template.Labels = map[string]string{"app": "db"}
	s.Spec.Template.Spec.Containers = []v1.Container{{Name: "c", Image: "v1"}}
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32)}}
	return s
}

// stsBooks runs the controller over a StatefulSet pass after pass, with
// the devices' reports given per pod.
type stsBooks struct {
	*books
	set *appsv1.StatefulSet
	// revs are the set's revisions as the hub stores them (a stored
	// template comes back as Kept); res is the last pass's result.
	revs map[string][]Revision
	res  Result
}

func newSTSBooks(s *appsv1.StatefulSet) *stsBooks {
	return &stsBooks{books: &books{owners: NewOwners(nil, nil, s), deleted: map[string]string{}}, set: s}
}

func (b *stsBooks) sync(now time.Time) {
	clear(b.deleted)
	b.events = nil
	b.owners = NewOwners(nil, nil, b.set)
	b.res = Sync(b, Pass{Now: now, StatefulSets: []*appsv1.StatefulSet{b.set}, Owners: b.owners, Revisions: b.revs})
	b.store()
}

// store keeps the pass's status on the set and its revisions, as the
// hub's store does (a revision's template kept when the pass gives none).
func (b *stsBooks) store() {
	for _, st := range b.res.Statuses {
		if st.StatefulSet != nil {
			b.set.Status = *st.StatefulSet
		}
	}
	if b.revs == nil {
		b.revs = map[string][]Revision{}
	}
	for _, rc := range b.res.Revisions {
		key := Index(rc.Kind, rc.Namespace, rc.Name)
		kept := map[string]*v1.PodTemplateSpec{}
		for _, r := range b.revs[key] {
			kept[r.Hash] = r.Kept
		}
		var out []Revision
		for _, r := range rc.Revisions {
			r.Kept = kept[r.Hash]
			if r.Template != nil {
				r.Kept = r.Template
			}
			r.Template = nil
			out = append(out, r)
		}
		b.revs[key] = out
	}
}

// ready has every live pod reported Running and Ready (since t0).
func (b *stsBooks) ready(names ...string) {
	for i := range b.pods {
		p := &b.pods[i]
		if len(names) == 0 && !p.Terminating || slices.Contains(names, p.Key.Name) {
			p.Node = "dev"
			p.Observed = Observed{Reported: true, Phase: v1.PodRunning, Ready: true, ReadySince: t0}
		}
	}
}

// gone forgets the terminating pods, as the hub does when their devices
// confirm they stopped.
func (b *stsBooks) gone() {
	b.pods = slices.DeleteFunc(b.pods, func(p Pod) bool { return p.Terminating })
}

func (b *stsBooks) names() []string {
	var out []string
	for _, p := range b.pods {
		if !p.Terminating {
			out = append(out, p.Key.Name)
		}
	}
	slices.Sort(out)
	return out
}

func (b *stsBooks) pod(name string) *Pod {
	for i := range b.pods {
		if b.pods[i].Key.Name == name {
			return &b.pods[i]
		}
	}
	return nil
}

// OrderedReady makes db-0, waits for it to be Running and Ready, then
// db-1; each pod carries its identity and the revision.
func TestStatefulSetOrderedReadyCreation(t *testing.T) {
	s := sts(3, appsv1.OrderedReadyPodManagement)
	b := newSTSBooks(s)
	b.sync(t0)
	if got := b.names(); !slices.Equal(got, []string{"db-0"}) {
		t.Fatalf("first pass made %v, want db-0 alone", got)
	}
	b.sync(t0) // not ready yet: nothing more
	if got := b.names(); len(got) != 1 {
		t.Fatalf("made %v before db-0 was ready", got)
	}
	b.ready()
	b.sync(t0)
	if got := b.names(); !slices.Equal(got, []string{"db-0", "db-1"}) {
		t.Fatalf("after db-0 ready: %v", got)
	}
	p := b.pod("db-1").Pod
	rev := updateRevision(s).Name
	want := map[string]string{"app": "db", LabelStatefulSetPodName: "db-1", LabelPodIndex: "1", LabelControllerHash: rev}
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if ref := ControllerOf(p); ref == nil || ref.Kind != "StatefulSet" || ref.Name != "db" || ref.UID != "u-db" {
		t.Errorf("owner %+v", ref)
	}
	if p.Spec.Hostname != "db-1" || p.Spec.Subdomain != "db" {
		t.Errorf("hostname %q subdomain %q", p.Spec.Hostname, p.Spec.Subdomain)
	}
	if len(b.events) != 1 || b.events[0].Reason != "SuccessfulCreate" || b.events[0].Message != "create Pod db-1 in StatefulSet db successful" {
		t.Errorf("events %+v", b.events)
	}
}

// Parallel makes every pod at once.
func TestStatefulSetParallel(t *testing.T) {
	b := newSTSBooks(sts(3, appsv1.ParallelPodManagement))
	b.sync(t0)
	if got := b.names(); !slices.Equal(got, []string{"db-0", "db-1", "db-2"}) {
		t.Fatalf("made %v", got)
	}
}

// Scaling down deletes the highest ordinal first, one at a time, each
// after its successor is gone.
func TestStatefulSetScaleDownFromTheTop(t *testing.T) {
	s := sts(3, appsv1.ParallelPodManagement)
	b := newSTSBooks(s)
	b.sync(t0)
	b.ready()
	s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	*s.Spec.Replicas = 1
	b.sync(t0)
	if b.deleted["db-2"] != ReasonStatefulSet || len(b.deleted) != 1 {
		t.Fatalf("deleted %v, want db-2 alone", b.deleted)
	}
	b.sync(t0) // db-2 still terminating
	if len(b.deleted) != 0 {
		t.Fatalf("deleted %v while db-2 terminates", b.deleted)
	}
	b.gone()
	b.sync(t0)
	if b.deleted["db-1"] == "" || len(b.deleted) != 1 {
		t.Fatalf("deleted %v, want db-1", b.deleted)
	}
}

// A pod whose name is still held (terminating on its device) is not made
// again until the device confirms it stopped: at most one copy.
func TestStatefulSetWaitsForTheName(t *testing.T) {
	s := sts(1, appsv1.ParallelPodManagement)
	b := newSTSBooks(s)
	b.sync(t0)
	b.ready()
	b.pods[0].Terminating = true // evicted from a device cut off
	for range 3 {
		b.sync(t0.Add(time.Hour))
	}
	if n := len(b.pods); n != 1 {
		t.Fatalf("%d pods: a second db-0 was made while the first terminates", n)
	}
	b.gone()
	b.sync(t0.Add(time.Hour))
	if got := b.names(); !slices.Equal(got, []string{"db-0"}) {
		t.Fatalf("after the device confirmed: %v", got)
	}
}

// A rolling update goes from the highest ordinal down to the partition,
// one pod at a time, each after the last updated one is ready again.
func TestStatefulSetRollingUpdateToThePartition(t *testing.T) {
	s := sts(3, appsv1.OrderedReadyPodManagement)
	b := newSTSBooks(s)
	for range 3 {
		b.sync(t0)
		b.ready()
	}
	old := updateRevision(s).Name
	s.Spec.Template.Spec.Containers[0].Image = "v2"
	*s.Spec.UpdateStrategy.RollingUpdate.Partition = 1
	rev := updateRevision(s).Name
	var order []string
	for range 10 {
		b.sync(t0)
		for name := range b.deleted {
			order = append(order, name)
		}
		b.gone()
		b.sync(t0)
		b.ready()
	}
	if !slices.Equal(order, []string{"db-2", "db-1"}) {
		t.Fatalf("update order %v, want db-2 then db-1 (db-0 is below the partition)", order)
	}
	for name, want := range map[string]string{"db-0": old, "db-1": rev, "db-2": rev} {
		if got := b.pod(name).Pod.Labels[LabelControllerHash]; got != want {
			t.Errorf("%s at %s, want %s", name, got, want)
		}
	}
	st := b.set.Status
	if st.CurrentRevision != old || st.UpdateRevision != rev || st.CurrentReplicas != 1 || st.UpdatedReplicas != 2 ||
		st.ReadyReplicas != 3 || st.Replicas != 3 || st.ObservedGeneration != 3 {
		t.Errorf("status %+v", st)
	}
	// db-0, below the partition and the last pod of the current
	// revision, deleted by hand comes back at the current revision,
	// made from its stored template, as Kubernetes rebuilds it from its
	// ControllerRevision.
	b.pod("db-0").Terminating = true
	b.gone()
	b.sync(t0)
	if got := b.pod("db-0").Pod; got.Labels[LabelControllerHash] != old || got.Spec.Containers[0].Image != "v1" {
		t.Fatalf("db-0 remade at %s with %s, want the current revision", got.Labels[LabelControllerHash], got.Spec.Containers[0].Image)
	}
	// The partition lowered to 0, db-0 is updated too, and the current
	// revision becomes the update revision once every replica is
	// updated and ready.
	b.ready()
	*s.Spec.UpdateStrategy.RollingUpdate.Partition = 0
	for range 4 {
		b.sync(t0)
		b.gone()
		b.sync(t0)
		b.ready()
	}
	b.sync(t0)
	if st := b.set.Status; st.CurrentRevision != rev || st.CurrentReplicas != 3 || st.UpdatedReplicas != 3 {
		t.Errorf("after the full rollout: status %+v, want current revision %s with 3 replicas", st, rev)
	}
}

// The rolling update waits for an updated pod to be ready.
func TestStatefulSetRollingUpdateWaitsForReady(t *testing.T) {
	s := sts(2, appsv1.ParallelPodManagement)
	b := newSTSBooks(s)
	b.sync(t0)
	b.ready()
	s.Spec.Template.Spec.Containers[0].Image = "v2"
	b.sync(t0)
	b.gone()
	b.sync(t0) // db-1 remade, not ready
	b.sync(t0)
	if len(b.deleted) != 0 {
		t.Fatalf("deleted %v before the new db-1 was ready", b.deleted)
	}
	b.ready("db-1")
	b.sync(t0)
	if b.deleted["db-0"] == "" {
		t.Fatalf("deleted %v, want db-0 once db-1 is ready", b.deleted)
	}
}

// maxUnavailable takes that many pods down at once.
func TestStatefulSetMaxUnavailable(t *testing.T) {
	s := sts(4, appsv1.ParallelPodManagement)
	two := intstr.FromInt32(2)
	s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &two
	b := newSTSBooks(s)
	b.sync(t0)
	b.ready()
	s.Spec.Template.Spec.Containers[0].Image = "v2"
	b.sync(t0)
	if len(b.deleted) != 2 || b.deleted["db-3"] == "" || b.deleted["db-2"] == "" {
		t.Fatalf("deleted %v, want db-3 and db-2", b.deleted)
	}
}

// OnDelete updates nothing by itself; a pod deleted by hand comes back
// at the new revision.
func TestStatefulSetOnDelete(t *testing.T) {
	s := sts(2, appsv1.ParallelPodManagement)
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	b := newSTSBooks(s)
	b.sync(t0)
	b.ready()
	s.Spec.Template.Spec.Containers[0].Image = "v2"
	b.sync(t0)
	if len(b.deleted) != 0 {
		t.Fatalf("OnDelete deleted %v", b.deleted)
	}
	b.pod("db-1").Terminating = true
	b.gone()
	b.sync(t0)
	if got := b.pod("db-1").Pod.Spec.Containers[0].Image; got != "v2" {
		t.Fatalf("db-1 remade with %s", got)
	}
}

// A failed pod is deleted, and remade once gone.
func TestStatefulSetRemakesAFailedPod(t *testing.T) {
	b := newSTSBooks(sts(1, appsv1.OrderedReadyPodManagement))
	b.sync(t0)
	b.pods[0].Observed = Observed{Reported: true, Phase: v1.PodFailed}
	b.sync(t0)
	if b.deleted["db-0"] != ReasonStatefulSet {
		t.Fatalf("deleted %v", b.deleted)
	}
	b.gone()
	b.sync(t0)
	if got := b.names(); !slices.Equal(got, []string{"db-0"}) {
		t.Fatalf("after: %v", got)
	}
}

// The pods of a StatefulSet deleted (or applied again with a new UID)
// are the garbage collector's; a pod named like a replica but owned by
// another keeps the name taken.
func TestStatefulSetOrphansAndForeignNames(t *testing.T) {
	s := sts(1, appsv1.OrderedReadyPodManagement)
	b := newSTSBooks(s)
	b.sync(t0)
	s2 := s.DeepCopy()
	s2.UID = "u-db-2"
	b.set = s2
	b.sync(t0)
	if b.deleted["db-0"] != ReasonOwnerDeleted {
		t.Fatalf("deleted %v, want the old db-0 as an orphan", b.deleted)
	}
	if n := len(b.pods); n != 1 {
		t.Fatalf("%d pods: the new set made db-0 while the old one terminates", n)
	}
	if len(b.events) != 1 || b.events[0].Reason != "FailedCreate" ||
		b.events[0].Message != `create Pod db-0 in StatefulSet db failed error: pods "db-0" already exists` {
		t.Errorf("events %+v", b.events)
	}
	b.gone()
	b.sync(t0)
	if p := b.pod("db-0"); p == nil || ControllerOf(p.Pod).UID != "u-db-2" {
		t.Fatalf("db-0 not remade for the new set: %+v", p)
	}
}

// Fenced and unreachable: every pod of the device is forgotten at once.
// Unreachable with a lease: a terminating lease pod is forgotten after
// the lease, its grace period and 2%, not before.
func TestForceDeleteFencedAndLeases(t *testing.T) {
	grace := int64(10)
	mk := func(name, lease string, terminating bool) Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		p.Spec.TerminationGracePeriodSeconds = &grace
		if lease != "" {
			p.Annotations = map[string]string{AnnotationLeaseSeconds: lease}
		}
		return Pod{Pod: p, Key: types.NamespacedName{Namespace: "default", Name: name}, Terminating: terminating}
	}
	cut := t0
	at := func(d time.Duration, fenced bool) map[string]string {
		b := &books{owners: NewOwners(nil, nil), deleted: map[string]string{}}
		for _, p := range []Pod{mk("lease", "60", true), mk("live-lease", "60", false), mk("plain", "", true)} {
			p.Node = "dev"
			b.pods = append(b.pods, p)
		}
		b.nodes = []Node{{Name: "dev", Node: &v1.Node{}, UnreachableSince: cut, Fenced: fenced}}
		Sync(b, Pass{Now: cut.Add(d), Owners: b.owners})
		return b.deleted
	}
	// (60 + 10) s × 1.02 = 71.4 s.
	if got := at(71399*time.Millisecond, false); len(got) != 0 {
		t.Fatalf("before the lease ran out: %v", got)
	}
	if got := at(71400*time.Millisecond, false); len(got) != 1 || got["lease"] != "force "+ReasonPodGC {
		t.Fatalf("after the lease: %v, want the terminating lease pod alone", got)
	}
	got := at(0, true)
	for _, name := range []string{"lease", "live-lease", "plain"} {
		if got[name] != "force "+ReasonPodGC {
			t.Errorf("fenced: %s %q", name, got[name])
		}
	}
}

func TestOrdinal(t *testing.T) {
	for name, want := range map[string]int{"db-0": 0, "db-12": 12, "db-": -1, "db-01": -1, "db-x": -1, "dbx-1": -1, "db-1-2": -1, "db--1": -1} {
		if got := ordinal("db", name); got != want {
			t.Errorf("ordinal(db, %s) = %d, want %d", name, got, want)
		}
	}
	if got := fmt.Sprint(LeaseSeconds(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationLeaseSeconds: "007"}}})); got != "0" {
		t.Errorf("lease of a malformed annotation: %s", got)
	}
}

// The failure threshold halts a rolling update: once the updated pod
// fails, no further ordinal is updated, even after it recovers; the
// status carries the halt, its transition time kept across passes, and
// the halt belongs to the revision.
func TestStatefulSetHaltStopsFurtherOrdinals(t *testing.T) {
	s := sts(3, appsv1.OrderedReadyPodManagement)
	s.Annotations = map[string]string{"rollout.podvisor.io/failure-threshold": "50%", "rollout.podvisor.io/failure-minimum": "1"}
	b := newSTSBooks(s)
	for range 3 {
		b.sync(t0)
		b.ready()
	}
	old := updateRevision(s).Name
	s.Spec.Template.Spec.Containers[0].Image = "v2"
	rev := updateRevision(s).Name
	b.sync(t0) // db-2 deleted
	b.gone()
	b.sync(t0) // db-2 made at v2
	p := b.pod("db-2")
	if p == nil || p.Pod.Labels[LabelControllerHash] != rev {
		t.Fatalf("db-2 not made at %s", rev)
	}
	p.Node, p.Observed = "dev", Observed{Reported: true, Phase: v1.PodRunning, Failure: "CrashLoopBackOff"}
	b.sync(t0.Add(time.Second))
	halted := func() appsv1.StatefulSetCondition {
		for _, c := range b.set.Status.Conditions {
			if c.Type == StatefulSetRolloutHalted {
				return c
			}
		}
		return appsv1.StatefulSetCondition{}
	}
	c := halted()
	if c.Status != v1.ConditionTrue || c.Reason != ReasonRolloutHalted || !strings.Contains(c.Message, `ControllerRevision "`+rev+`" rollout halted`) {
		t.Fatalf("status %+v, want RolloutHalted", b.set.Status)
	}
	if len(b.events) == 0 || b.events[len(b.events)-1].Reason != ReasonRolloutHalted {
		t.Errorf("events %+v, want a RolloutHalted event", b.events)
	}
	// db-2 recovers: without the halt, db-1 would be next.
	b.ready("db-2")
	for range 3 {
		b.sync(t0.Add(time.Minute))
		b.gone()
	}
	if got := b.pod("db-1").Pod.Labels[LabelControllerHash]; got != old || len(b.deleted) != 0 {
		t.Fatalf("db-1 at %s (deleted %v) after the halt, want it kept at %s", got, b.deleted, old)
	}
	if got := halted(); !got.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("halt transition time moved from %v to %v", c.LastTransitionTime, got.LastTransitionTime)
	}
	// A new template starts afresh.
	s.Spec.Template.Spec.Containers[0].Image = "v3"
	b.sync(t0.Add(2 * time.Minute))
	if halted().Type != "" || b.deleted["db-2"] == "" {
		t.Errorf("after a new template: conditions %+v, deleted %v; want no halt and db-2 updated", b.set.Status.Conditions, b.deleted)
	}
}
