package schedule

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// fleetSim runs passes on a fake clock as podhub does: the plan is
// applied, terminating pods confirmed gone, statuses and revisions stored
// back, and each pod newly bound is reported by its device as report
// says (by the pod's template image).
type fleetSim struct {
	t      *testing.T
	in     Input
	report func(p *v1.Pod, now time.Time) workloads.Observed
	events []Event
}

func newSim(t *testing.T, in Input) *fleetSim {
	in.Observed = map[types.NamespacedName]workloads.Observed{}
	in.Revisions = map[string][]workloads.Revision{}
	return &fleetSim{t: t, in: in, report: byImage}
}

// byImage: "bad" never becomes Ready, "crash" crash-loops, any other
// image is Ready at once.
func byImage(p *v1.Pod, now time.Time) workloads.Observed {
	switch p.Spec.Containers[0].Image {
	case "bad":
		return workloads.Observed{Reported: true, Phase: v1.PodRunning}
	case "crash":
		return workloads.Observed{Reported: true, Phase: v1.PodRunning, Restarts: 3, Failure: "CrashLoopBackOff"}
	}
	return workloads.Observed{Reported: true, Phase: v1.PodRunning, Ready: true, ReadySince: now}
}

func (s *fleetSim) pass(after time.Duration) Plan {
	s.in.Now = s.in.Now.Add(after)
	plan := Schedule(s.in)
	s.in = removeTerminating(apply(s.in, plan, s.in.Now))
	s.events = append(s.events, plan.Events...)
	for _, st := range plan.Statuses {
		for _, d := range s.in.Deployments {
			if st.Deployment != nil && d.Name == st.Name {
				d.Status = *st.Deployment.DeepCopy()
			}
		}
		for _, d := range s.in.DaemonSets {
			if st.DaemonSet != nil && d.Name == st.Name {
				d.Status = *st.DaemonSet.DeepCopy()
			}
		}
		for _, d := range s.in.StatefulSets {
			if st.StatefulSet != nil && d.Name == st.Name {
				d.Status = *st.StatefulSet.DeepCopy()
			}
		}
	}
	for _, rc := range plan.Revisions {
		s.in.Revisions[workloads.Index(rc.Kind, rc.Namespace, rc.Name)] = storedRevisions(rc, s.in.Revisions)
	}
	held := map[types.NamespacedName]bool{}
	for _, p := range s.in.Pods {
		held[keyOf(p)] = true
	}
	for k := range s.in.Observed {
		if !held[k] {
			delete(s.in.Observed, k) // its mirror went with it
		}
	}
	for _, p := range s.in.Pods {
		if _, seen := s.in.Observed[keyOf(p)]; p.Spec.NodeName != "" && !seen {
			s.in.Observed[keyOf(p)] = s.report(p, s.in.Now)
		}
	}
	return plan
}

// storedRevisions are a pass's revisions as the store reads them back:
// a StatefulSet's templates kept (Kept), the rest as the pass gave them.
func storedRevisions(rc workloads.RevisionChange, stored map[string][]workloads.Revision) []workloads.Revision {
	if rc.Kind != "StatefulSet" {
		return rc.Revisions
	}
	kept := map[string]*v1.PodTemplateSpec{}
	for _, r := range stored[workloads.Index(rc.Kind, rc.Namespace, rc.Name)] {
		kept[r.Hash] = r.Kept
	}
	out := make([]workloads.Revision, 0, len(rc.Revisions))
	for _, r := range rc.Revisions {
		r.Kept = kept[r.Hash]
		if r.Template != nil {
			r.Kept, r.Template = r.Template, nil
		}
		out = append(out, r)
	}
	return out
}

// count counts the live pods of an image, and those ready among them.
func (s *fleetSim) count(image string) (live, ready int) {
	for _, p := range s.in.Pods {
		if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == image {
			live++
			if s.in.Observed[keyOf(p)].Ready {
				ready++
			}
		}
	}
	return live, ready
}

func rolling(d *appsv1.Deployment, surge, unavailable int32) {
	s, u := intstr.FromInt32(surge), intstr.FromInt32(unavailable)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &s, MaxUnavailable: &u}}
	d.Spec.ProgressDeadlineSeconds, d.Spec.RevisionHistoryLimit = int32p(600), int32p(10)
}

func progressing(d *appsv1.Deployment) appsv1.DeploymentCondition {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			return c
		}
	}
	return appsv1.DeploymentCondition{}
}

func rsName(d *appsv1.Deployment) string { return d.Name + "-" + TemplateHash(&d.Spec.Template) }

// A Deployment rolled to a revision whose pods never become Ready takes
// no more than maxUnavailable down, never holds more than maxSurge
// extra, and says ProgressDeadlineExceeded once the deadline passes; it
// goes on waiting within the same bounds, as in Kubernetes.
func TestBrokenRevisionStaysWithinMaxUnavailable(t *testing.T) {
	web := deployment("web", 4, kv("app=web"), "", "")
	rolling(web, 1, 1)
	web.Spec.Template.Spec.Containers[0].Image = "v1"
	s := newSim(t, Input{Now: t0, Devices: zoned(4), Deployments: []*appsv1.Deployment{web}})
	s.pass(0)
	s.pass(time.Second)
	if c := progressing(web); c.Reason != workloads.ReasonNewRSAvailable || c.Message != fmt.Sprintf("ReplicaSet %q has successfully progressed.", rsName(web)) {
		t.Fatalf("progressing %+v, want NewReplicaSetAvailable", c)
	}
	web.Generation = 2
	web.Spec.Template.Spec.Containers[0].Image = "bad"
	for i := range 15 {
		s.pass(time.Minute)
		_, ready := s.count("v1")
		newLive, _ := s.count("bad")
		oldLive, _ := s.count("v1")
		if ready < 3 || oldLive+newLive > 5 {
			t.Fatalf("minute %d: %d old ready, %d pods in all; want at least 3 ready and at most 5", i+1, ready, oldLive+newLive)
		}
		if c := progressing(web); i < 9 && c.Reason == workloads.ReasonTimedOut {
			t.Fatalf("minute %d: timed out before the deadline", i+1)
		}
	}
	st := web.Status
	if st.Replicas != 5 || st.UpdatedReplicas != 2 || st.ReadyReplicas != 3 || st.AvailableReplicas != 3 || st.UnavailableReplicas != 2 || st.ObservedGeneration != 2 {
		t.Errorf("status %+v, want 5 replicas, 2 updated, 3 ready and available, 2 unavailable, generation 2", st)
	}
	c := progressing(web)
	if c.Status != v1.ConditionFalse || c.Reason != workloads.ReasonTimedOut || c.Message != fmt.Sprintf("ReplicaSet %q has timed out progressing.", rsName(web)) {
		t.Errorf("progressing %+v, want False ProgressDeadlineExceeded", c)
	}
	for _, c := range web.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && (c.Status != v1.ConditionTrue || c.Message != "Deployment has minimum availability.") {
			t.Errorf("available %+v, want True: 3 of 4 with maxUnavailable 1", c)
		}
	}
}

// Crash-looping pods of a new revision halt it at the failure threshold
// once the minimum of verdicts is there: nothing more moves, the pods
// already updated stay, Progressing=False RolloutHalted with the counts,
// and an event says so. Below the minimum it does not halt.
func TestCrashLoopHaltsAtTheThresholdAndUndoResumes(t *testing.T) {
	for _, minimum := range []string{"3", "4"} {
		t.Run("minimum "+minimum, func(t *testing.T) {
			web := deployment("web", 10, kv("app=web"), "", "")
			rolling(web, 0, 3)
			web.Annotations = map[string]string{kinds.AnnotationFailureThreshold: "50%", kinds.AnnotationFailureMinimum: minimum}
			web.Spec.Template.Spec.Containers[0].Image = "v1"
			good := web.Spec.Template
			s := newSim(t, Input{Now: t0, Devices: zoned(5), Deployments: []*appsv1.Deployment{web}})
			s.pass(0)
			s.pass(time.Second)
			web.Spec.Template = *good.DeepCopy()
			web.Spec.Template.Spec.Containers[0].Image = "crash"
			bad := rsName(web)
			for range 4 {
				s.pass(time.Second)
			}
			crashing, _ := s.count("crash")
			old, oldReady := s.count("v1")
			if crashing != 3 || old != 7 || oldReady != 7 {
				t.Fatalf("%d crashing, %d old (%d ready); want 3 and 7", crashing, old, oldReady)
			}
			c := progressing(web)
			if minimum == "4" {
				if c.Reason == workloads.ReasonRolloutHalted {
					t.Fatalf("halted with 3 verdicts, minimum 4: %+v", c)
				}
				return
			}
			if c.Status != v1.ConditionFalse || c.Reason != workloads.ReasonRolloutHalted || !strings.Contains(c.Message, fmt.Sprintf("ReplicaSet %q rollout halted: 3 of 3", bad)) {
				t.Fatalf("progressing %+v, want False RolloutHalted naming 3 of 3", c)
			}
			if n := len(eventsOfKind(s.events, workloads.ReasonRolloutHalted)); n != 1 {
				t.Errorf("%d RolloutHalted events, want 1", n)
			}
			// Halted for good: later passes move nothing.
			for range 3 {
				if plan := s.pass(time.Hour); len(plan.Create)+len(plan.Deletions) != 0 {
					t.Fatalf("a halted rollout moved pods: %+v", plan)
				}
			}
			// Undo: the good template again, numbered newest; the halt
			// was the bad revision's, and the rollout goes back.
			web.Spec.Template = *good.DeepCopy()
			for range 8 {
				s.pass(time.Second)
			}
			if crashing, _ := s.count("crash"); crashing != 0 {
				t.Fatalf("%d crashing pods left after undo", crashing)
			}
			if c := progressing(web); c.Reason != workloads.ReasonNewRSAvailable || web.Status.AvailableReplicas != 10 {
				t.Fatalf("after undo: progressing %+v, %d available", c, web.Status.AvailableReplicas)
			}
			revs := s.in.Revisions[workloads.Index("Deployment", "default", "web")]
			if len(revs) != 2 || revs[0].Hash != strings.TrimPrefix(bad, "web-") || revs[0].Number != 2 || revs[1].Number != 3 || revs[0].Halted == "" || revs[1].Halted != "" {
				t.Errorf("revisions %+v, want the halted 2 and the restored 3", revs)
			}
		})
	}
}

func eventsOfKind(es []Event, reason string) []Event {
	var out []Event
	for _, e := range es {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// One halted workload holds back no other: each workload's sync is its own.
func TestHaltedWorkloadBlocksNoOther(t *testing.T) {
	broken, fine := deployment("broken", 4, kv("app=broken"), "", ""), deployment("fine", 4, kv("app=fine"), "", "")
	for _, d := range []*appsv1.Deployment{broken, fine} {
		rolling(d, 1, 1)
		d.Spec.Template.Spec.Containers[0].Image = "v1"
	}
	broken.Annotations = map[string]string{kinds.AnnotationFailureThreshold: "1%"}
	s := newSim(t, Input{Now: t0, Devices: zoned(4), Deployments: []*appsv1.Deployment{broken, fine}})
	s.pass(0)
	s.pass(time.Second)
	broken.Spec.Template.Spec.Containers[0].Image = "crash"
	fine.Spec.Template.Spec.Containers[0].Image = "v2"
	for range 10 {
		s.pass(time.Second)
	}
	if c := progressing(broken); c.Reason != workloads.ReasonRolloutHalted {
		t.Errorf("broken: %+v, want halted", c)
	}
	if c := progressing(fine); c.Reason != workloads.ReasonNewRSAvailable || fine.Status.UpdatedReplicas != 4 {
		t.Errorf("fine: %+v with %d updated, want rolled out", c, fine.Status.UpdatedReplicas)
	}
}

// A new pod counts as available minReadySeconds after its device first
// said Ready (on the hub's clock), and the pass asks to run then.
func TestAvailableAfterMinReadySecondsWakesThePass(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	rolling(web, 1, 0)
	web.Spec.MinReadySeconds = 30
	s := newSim(t, Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}})
	s.pass(0)
	plan := s.pass(time.Second)
	if st := web.Status; st.ReadyReplicas != 2 || st.AvailableReplicas != 0 || st.UnavailableReplicas != 2 {
		t.Fatalf("status %+v, want 2 ready, none available yet", st)
	}
	if want := t0.Add(30 * time.Second); !plan.Wake.Equal(want) {
		t.Fatalf("wake %v, want %v (ready since t0, 30 s)", plan.Wake, want)
	}
	for _, c := range web.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && (c.Status != v1.ConditionFalse || c.Reason != workloads.ReasonMinimumUnavailable || c.Message != "Deployment does not have minimum availability.") {
			t.Errorf("available %+v, want False MinimumReplicasUnavailable", c)
		}
	}
	s.pass(30 * time.Second)
	if st := web.Status; st.AvailableReplicas != 2 || progressing(web).Reason != workloads.ReasonNewRSAvailable {
		t.Fatalf("status %+v, want 2 available and complete", st)
	}
}

// A paused Deployment makes no rollout progress and says so; resumed, it
// rolls out.
func TestPausedDeploymentHoldsItsRollout(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	rolling(web, 1, 0)
	web.Spec.Template.Spec.Containers[0].Image = "v1"
	s := newSim(t, Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}})
	s.pass(0)
	s.pass(time.Second)
	web.Spec.Paused = true
	web.Spec.Template.Spec.Containers[0].Image = "v2"
	if plan := s.pass(time.Second); len(plan.Create)+len(plan.Deletions) != 0 {
		t.Fatalf("paused: %+v", plan)
	}
	if c := progressing(web); c.Status != v1.ConditionUnknown || c.Reason != workloads.ReasonPaused || c.Message != "Deployment is paused" {
		t.Fatalf("progressing %+v, want Unknown DeploymentPaused", c)
	}
	web.Spec.Paused = false
	s.pass(time.Second)
	for range 4 {
		s.pass(time.Second)
	}
	if v2, _ := s.count("v2"); v2 != 2 || progressing(web).Reason != workloads.ReasonNewRSAvailable {
		t.Fatalf("resumed: %d v2 pods, %+v", v2, progressing(web))
	}
}

// An unreachable device holds back no DaemonSet rollout: it is not one
// of the devices the budget counts, it is shown skipped, and it gets
// the current revision when it returns.
func TestDaemonSetRolloutSkipsUnreachableDevice(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "")
	agent.Spec.Template.Spec.Containers[0].Image = "v1"
	devs := zoned(5)
	s := newSim(t, Input{Now: t0, Devices: devs, DaemonSets: []*appsv1.DaemonSet{agent}})
	s.pass(0)
	s.pass(time.Second)
	s.in.Devices[2].UnreachableSince = s.in.Now
	agent.Spec.Template.Spec.Containers[0].Image = "v2"
	for range 12 {
		s.pass(time.Second)
	}
	st := agent.Status
	if st.DesiredNumberScheduled != 4 || st.UpdatedNumberScheduled != 4 || st.NumberAvailable != 4 {
		t.Fatalf("status %+v, want the 4 reachable devices updated", st)
	}
	if len(st.Conditions) != 1 || st.Conditions[0].Type != workloads.ConditionDevicesSkipped || !strings.Contains(st.Conditions[0].Message, "dev2") {
		t.Fatalf("conditions %+v, want dev2 skipped", st.Conditions)
	}
	// Its pod is left alone while it is away: a deletion it cannot hear
	// would take the pod down, outside the budget, when it returns.
	if old, _ := s.count("v1"); old != 1 {
		t.Fatalf("%d v1 pods, want dev2's kept while it is unreachable", old)
	}
	s.in.Devices[2].UnreachableSince = time.Time{}
	for range 3 {
		s.pass(time.Second)
		// Back, it is updated within the budget (maxUnavailable 1).
		available := map[string]bool{}
		for _, p := range s.in.Pods {
			if p.DeletionTimestamp == nil && s.in.Observed[keyOf(p)].Ready {
				available[p.Spec.NodeName] = true
			}
		}
		if down := len(devs) - len(available); down > 1 {
			t.Fatalf("%d devices without an available pod, over maxUnavailable 1", down)
		}
	}
	if st := agent.Status; st.UpdatedNumberScheduled != 5 || len(st.Conditions) != 0 {
		t.Fatalf("status %+v after dev2 returned, want 5 updated", st)
	}
}

// A DaemonSet halts as a Deployment does: crash-looping devices past the
// threshold stop the rollout; the rest keep their old pods.
func TestDaemonSetHaltsAtTheThreshold(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "")
	agent.Spec.Template.Spec.Containers[0].Image = "v1"
	agent.Annotations = map[string]string{kinds.AnnotationFailureThreshold: "50%", kinds.AnnotationFailureMinimum: "2"}
	three := intstr.FromInt32(2)
	agent.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &three}}
	s := newSim(t, Input{Now: t0, Devices: zoned(8), DaemonSets: []*appsv1.DaemonSet{agent}})
	s.pass(0)
	s.pass(time.Second)
	agent.Spec.Template.Spec.Containers[0].Image = "crash"
	for range 10 {
		s.pass(time.Second)
	}
	crashing, _ := s.count("crash")
	old, _ := s.count("v1")
	if crashing != 2 || old != 6 {
		t.Fatalf("%d devices updated, %d old; want the rollout halted at 2 of 8", crashing, old)
	}
	halted := false
	for _, c := range agent.Status.Conditions {
		halted = halted || c.Type == workloads.ConditionRolloutHalted
	}
	if !halted || agent.Status.UpdatedNumberScheduled != 2 {
		t.Fatalf("status %+v, want RolloutHalted with 2 updated", agent.Status)
	}
	// Undo: the first template is the newest revision again; the two
	// crash-looping devices go back to it.
	agent.Spec.Template.Spec.Containers[0].Image = "v1"
	for range 6 {
		s.pass(time.Second)
	}
	if crashing, _ := s.count("crash"); crashing != 0 || agent.Status.UpdatedNumberScheduled != 8 || len(agent.Status.Conditions) != 0 {
		t.Fatalf("after undo: %d crashing, status %+v", crashing, agent.Status)
	}
}

// A pod on a device that is not Ready counts as not ready, whatever the
// device last reported, as the node lifecycle controller marks it.
func TestPodOnUnreachableDeviceIsNotReady(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	rolling(web, 1, 0)
	s := newSim(t, Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}})
	s.pass(0)
	s.pass(time.Second)
	if web.Status.ReadyReplicas != 2 {
		t.Fatalf("status %+v, want 2 ready", web.Status)
	}
	s.in.Devices[1].UnreachableSince = s.in.Now
	s.pass(time.Second)
	if st := web.Status; st.ReadyReplicas != 1 || st.AvailableReplicas != 1 || st.UnavailableReplicas != 1 {
		t.Fatalf("status %+v, want the unreachable device's pod neither ready nor available", st)
	}
}

// Revisions are numbered as ReplicaSets are, and once a rollout is
// complete the oldest without pods beyond revisionHistoryLimit go; the
// newest keeps its template for undo.
func TestRevisionsNumberedAndPruned(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	rolling(web, 1, 0)
	web.Spec.RevisionHistoryLimit = int32p(2)
	s := newSim(t, Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}})
	for i := 1; i <= 5; i++ {
		web.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("v%d", i)
		for range 5 {
			s.pass(time.Second)
		}
	}
	revs := s.in.Revisions[workloads.Index("Deployment", "default", "web")]
	var numbers []int64
	for _, r := range revs {
		numbers = append(numbers, r.Number)
	}
	if fmt.Sprint(numbers) != "[3 4 5]" {
		t.Fatalf("revisions %v, want the newest and 2 old: [3 4 5]", numbers)
	}
	if last := revs[2]; last.Hash != TemplateHash(&web.Spec.Template) || last.Template == nil || last.Template.Spec.Containers[0].Image != "v5" {
		t.Errorf("newest revision %+v, want v5's with its template", last)
	}
}
