package schedule

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func pdbFor(name string, minAvailable intstr.IntOrString, labels map[string]string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
}

// readyLive counts the pods the devices report Ready that are not
// terminating.
func readyLive(in Input) int {
	n := 0
	for _, p := range in.Pods {
		if p.DeletionTimestamp == nil && in.Observed[keyOf(p)].Ready {
			n++
		}
	}
	return n
}

// A rollout that alone would take two pods down at once (maxSurge 0,
// maxUnavailable 2) takes one at a time under minAvailable 3 of 4, and
// still finishes.
func TestDeploymentRolloutHonoursTheBudget(t *testing.T) {
	web := deployment("web", 4, kv("app=web"), "", "")
	two, zero := intstr.FromInt32(2), intstr.FromInt32(0)
	web.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &two}}
	in := Input{Now: t0, Devices: zoned(4), Deployments: []*appsv1.Deployment{web},
		PDBs: []*policyv1.PodDisruptionBudget{pdbFor("web", intstr.FromInt32(3), kv("app=web"))}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	web.Spec.Template.Spec.Containers[0].Image = "v2"
	for pass := 1; ; pass++ {
		if pass > 30 {
			t.Fatal("rollout did not finish in 30 passes")
		}
		now := t0.Add(time.Duration(pass) * time.Minute)
		plan := Schedule(in)
		if n := countReason(plan, ReasonOutdated); n > 1 {
			t.Fatalf("pass %d: %d pods taken down at once under a budget allowing 1", pass, n)
		}
		for _, pdb := range plan.PDBs {
			in.PDBs = []*policyv1.PodDisruptionBudget{pdb}
		}
		in = apply(in, plan, now)
		if got := readyLive(in); got < 3 {
			t.Fatalf("pass %d: %d ready pods left, budget wants 3", pass, got)
		}
		in = markReady(removeTerminating(in), now)
		if len(plan.Create)+len(plan.Deletions) == 0 {
			old := 0
			for _, p := range in.Pods {
				if p.Labels[LabelPodTemplateHash] != TemplateHash(&web.Spec.Template) {
					old++
				}
			}
			if old != 0 || len(in.Pods) != 4 {
				t.Fatalf("rollout stalled at pass %d with %d old of %d", pass, old, len(in.Pods))
			}
			break
		}
	}
	st := in.PDBs[0].Status
	if st.ExpectedPods != 4 || st.DesiredHealthy != 3 || st.ObservedGeneration != 1 {
		t.Fatalf("budget status %+v", st)
	}
}

// A budget with no room holds a DaemonSet's update back; the pass
// reports the budget's status with the DisruptionAllowed condition.
func TestDaemonSetRolloutWaitsForTheBudget(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "")
	in := Input{Now: t0, Devices: zoned(3), DaemonSets: []*appsv1.DaemonSet{agent},
		PDBs: []*policyv1.PodDisruptionBudget{pdbFor("agent", intstr.FromInt32(3), kv("app=agent"))}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	agent.Spec.Template.Spec.Containers[0].Image = "v2"
	plan := Schedule(in)
	if n := countReason(plan, ReasonOutdated); n != 0 {
		t.Fatalf("%d pods taken down with no disruption allowed", n)
	}
	if len(plan.PDBs) != 1 || plan.PDBs[0].Status.CurrentHealthy != 3 || plan.PDBs[0].Status.DisruptionsAllowed != 0 ||
		plan.PDBs[0].Status.Conditions[0].Reason != policyv1.InsufficientPodsReason {
		t.Fatalf("budgets %+v", plan.PDBs)
	}
	in.PDBs = []*policyv1.PodDisruptionBudget{pdbFor("agent", intstr.FromInt32(2), kv("app=agent"))}
	if plan = Schedule(in); countReason(plan, ReasonOutdated) != 1 {
		t.Fatalf("with one disruption allowed: %v", plan.Deletions)
	}
	// An unready old pod goes under AlwaysAllow, not under IfHealthyBudget
	// while the budget is short.
	in.PDBs = []*policyv1.PodDisruptionBudget{pdbFor("agent", intstr.FromInt32(3), kv("app=agent"))}
	sick := in.Pods[0]
	in.Observed[keyOf(sick)] = in.Observed[keyOf(sick)]
	obs := in.Observed[keyOf(sick)]
	obs.Ready = false
	in.Observed[keyOf(sick)] = obs
	if plan = Schedule(in); countReason(plan, ReasonOutdated) != 0 {
		t.Fatalf("IfHealthyBudget let an unready pod go: %v", plan.Deletions)
	}
	always := policyv1.AlwaysAllow
	in.PDBs[0].Spec.UnhealthyPodEvictionPolicy = &always
	if plan = Schedule(in); countReason(plan, ReasonOutdated) != 1 || plan.Deletions[0].Pod.Name != sick.Name {
		t.Fatalf("AlwaysAllow: %v", plan.Deletions)
	}
}

// Deletions for disruptions carry the DisruptionTarget reason; a
// workload's own do not.
func TestDeletionsSayTheDisruption(t *testing.T) {
	web := deployment("web", 1, kv("app=web"), "", "")
	in := Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}}
	in = apply(in, Schedule(in), t0)
	gone := in.Pods[0].Spec.NodeName
	var keep []Device
	for _, d := range in.Devices {
		if d.Name != gone {
			keep = append(keep, d)
		}
	}
	lost := in
	lost.Devices = keep
	if d, _ := deletionOf(Schedule(lost), in.Pods[0].Name); d.Disruption != DisruptionPodGC {
		t.Fatalf("device gone: %+v", d)
	}
	tainted := in
	tainted.Devices = append([]Device(nil), in.Devices...)
	for i := range tainted.Devices {
		if tainted.Devices[i].Name == gone {
			tainted.Devices[i].Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute}}
		}
	}
	if d, _ := deletionOf(Schedule(tainted), in.Pods[0].Name); d.Disruption != ReasonTaint {
		t.Fatalf("taint: %+v", d)
	}
	web.Spec.Replicas = int32p(0)
	if d, _ := deletionOf(Schedule(in), in.Pods[0].Name); d.Reason != ReasonScaledDown || d.Disruption != "" {
		t.Fatalf("scaled down: %+v", d)
	}
}
