package main

import (
	"testing"

	"github.com/podvisor/podvisor/sync/hub/api"
	v1 "k8s.io/api/core/v1"
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
