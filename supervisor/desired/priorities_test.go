package desired

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/priority"
)

func TestResolveFilePods(t *testing.T) {
	classes := priority.Builtin()
	strict := Policy{ForbidPrivileged: true}
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		policy   Policy
		priority int32  // when it runs
		rejected string // part of the reason, when it does not
	}{
		{name: "no class", pod: pod("default", "plain", "/m/a.yaml"), priority: 0},
		{name: "a built-in class", pod: pod("kube-system", "crit", "/m/a.yaml", class(priority.SystemNodeCriticalName)), priority: priority.SystemNodeCritical},
		{name: "an unknown class", pod: pod("default", "lost", "/m/a.yaml", class("nope")), rejected: `pod "lost"`},
		{name: "privileged, allowed", pod: pod("default", "priv", "/m/a.yaml", privileged), priority: 0},
		{name: "privileged, forbidden", pod: pod("default", "priv", "/m/a.yaml", privileged), policy: strict, rejected: "forbidPrivileged"},
	} {
		ok, rejected := resolveFilePods([]*v1.Pod{tc.pod}, tc.policy, classes)
		if tc.rejected != "" {
			if err := rejected[tc.pod]; len(ok) != 0 || err == nil || !strings.Contains(err.Error(), tc.rejected) {
				t.Errorf("%s: ran %d, rejected with %v; want rejected with %q", tc.name, len(ok), err, tc.rejected)
			}
			continue
		}
		if len(ok) != 1 || len(rejected) != 0 {
			t.Fatalf("%s: ran %d, rejected %v; want it to run", tc.name, len(ok), rejected)
		}
		if ok[0] == tc.pod || tc.pod.Spec.Priority != nil {
			t.Errorf("%s: the manifest's pod was changed; a resolved copy must run", tc.name)
		}
		if got := ok[0].Spec.Priority; got == nil || *got != tc.priority {
			t.Errorf("%s: priority %v, want %d", tc.name, got, tc.priority)
		}
	}
}
