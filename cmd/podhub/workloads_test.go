package main

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

func TestParseTaintAsKubectl(t *testing.T) {
	for spec, want := range map[string]struct {
		key, value string
		effect     v1.TaintEffect
		remove     bool
	}{
		"dedicated=cam:NoSchedule": {"dedicated", "cam", v1.TaintEffectNoSchedule, false},
		"gpu:NoExecute":            {"gpu", "", v1.TaintEffectNoExecute, false},
		"dedicated:NoSchedule-":    {"dedicated", "", v1.TaintEffectNoSchedule, true},
		"dedicated-":               {"dedicated", "", "", true},
	} {
		got, err := parseTaint(spec)
		if err != nil || got.Taint.Key != want.key || got.Taint.Value != want.value || got.Taint.Effect != want.effect || got.Remove != want.remove {
			t.Errorf("%s: got %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"dedicated=cam", "=v:NoSchedule", ":NoSchedule"} {
		if _, err := parseTaint(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestDeleteAndTaintSayWhatKubectlSays(t *testing.T) {
	for path, want := range map[string]string{
		"priorityclasses": `priorityclass.scheduling.k8s.io "high" deleted`,
		"daemonsets":      `daemonset.apps "high" deleted; its pods terminate on their devices`,
		"deployments":     `deployment.apps "high" deleted; its pods terminate on their devices`,
	} {
		if got := deletedMessage(path, "high"); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	parse := func(specs ...string) []api.TaintRequest {
		var out []api.TaintRequest
		for _, s := range specs {
			r, err := parseTaint(s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	for want, specs := range map[string][]string{
		"tainted":   {"a=b:NoSchedule", "c:NoExecute"},
		"untainted": {"a-", "c:NoExecute-"},
		"modified":  {"a=b:NoSchedule", "c-"},
	} {
		if got := taintVerb(parse(specs...)); got != want {
			t.Errorf("%v: %s, want %s", specs, got, want)
		}
	}
}

// A PriorityClass has no namespace: its URL says "-" whatever -n says.
func TestWorkloadURL(t *testing.T) {
	for _, c := range []struct{ path, ns, name, want string }{
		{"deployments", "default", "bridge", "/v1/workloads/deployments/default/bridge"},
		{"daemonsets", "a/b", "x y", "/v1/workloads/daemonsets/a%2Fb/x%20y"},
		{"priorityclasses", "default", "important", "/v1/workloads/priorityclasses/-/important"},
	} {
		if got := workloadURL(c.path, c.ns, c.name); got != c.want {
			t.Errorf("workloadURL(%q, %q, %q) = %q, want %q", c.path, c.ns, c.name, got, c.want)
		}
	}
}

// rollout status says what kubectl's status viewers say, and fails on a
// progress deadline or a halt with the reason.
func TestRolloutStateAsKubectl(t *testing.T) {
	three := int32(3)
	dep := func(gen, observed int64, replicas, updated, available int32, progressing string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: &three},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}}
		if progressing != "" {
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Reason: progressing, Message: "ReplicaSet \"web-x\" rollout halted: 3 of 3 updated pods with a verdict failed"}}
		}
		return d
	}
	for _, c := range []struct {
		d    *appsv1.Deployment
		want string
		done bool
		err  string
	}{
		{dep(2, 1, 3, 3, 3, ""), "Waiting for deployment spec update to be observed...\n", false, ""},
		{dep(2, 2, 4, 1, 3, workloads.ReasonRSUpdated), "Waiting for deployment \"web\" rollout to finish: 1 out of 3 new replicas have been updated...\n", false, ""},
		{dep(2, 2, 4, 3, 3, ""), "Waiting for deployment \"web\" rollout to finish: 1 old replicas are pending termination...\n", false, ""},
		{dep(2, 2, 3, 3, 2, ""), "Waiting for deployment \"web\" rollout to finish: 2 of 3 updated replicas are available...\n", false, ""},
		{dep(2, 2, 3, 3, 3, workloads.ReasonNewRSAvailable), "deployment \"web\" successfully rolled out\n", true, ""},
		{dep(2, 2, 4, 1, 3, workloads.ReasonTimedOut), "", false, `deployment "web" exceeded its progress deadline`},
		{dep(2, 2, 4, 1, 3, workloads.ReasonRolloutHalted), "", false, `deployment "web": ReplicaSet "web-x" rollout halted: 3 of 3`},
	} {
		got, done, err := deploymentState(c.d)
		if got != c.want || done != c.done || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v: %q %v %v; want %q %v %q", c.d.Status, got, done, err, c.want, c.done, c.err)
		}
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Generation: 1},
		Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 999, UpdatedNumberScheduled: 999, NumberAvailable: 999,
			Conditions: []appsv1.DaemonSetCondition{{Type: workloads.ConditionDevicesSkipped, Message: "1 unreachable device(s) not updated, updated when they return: gw-7"}}}}
	got, done, err := daemonSetState(ds)
	if err != nil || !done || got != "daemon set \"agent\" successfully rolled out\n1 unreachable device(s) not updated, updated when they return: gw-7\n" {
		t.Errorf("daemon set: %q %v %v", got, done, err)
	}
	ds.Status.UpdatedNumberScheduled = 10
	if got, done, _ := daemonSetState(ds); done || !strings.HasPrefix(got, "Waiting for daemon set \"agent\" rollout to finish: 10 out of 999 new pods have been updated...\n") {
		t.Errorf("daemon set rolling: %q %v", got, done)
	}
}
