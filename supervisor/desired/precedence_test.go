package desired

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
)

// pod is a minimal pod; file names the manifest file it came from ("":
// a hub pod).
func pod(namespace, name, file string, edit ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: map[string]string{}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	if file != "" {
		p.Annotations[manifest.AnnotationFile] = file
	}
	for _, e := range edit {
		e(p)
	}
	return p
}

func privileged(p *v1.Pod) {
	yes := true
	p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{Privileged: &yes}
}

func hostPath(p *v1.Pod) {
	p.Spec.Volumes = []v1.Volume{{Name: "etc", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/etc"}}}}
}

func class(name string) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.PriorityClassName = name }
}

// One decision says what runs and what the hub is told it cannot run: a
// file pod beats a hub pod of the same namespace/name, then the device's
// policy for hub pods, then its priority classes.
func TestDesiredPodsPrecedence(t *testing.T) {
	type refusal struct {
		pod    string
		cause  refusalCause
		reason string
	}
	tests := []struct {
		name    string
		files   []*v1.Pod
		hub     []*v1.Pod
		policy  Policy
		run     []string // namespace/name, in order
		refused []refusal
	}{
		{name: "nothing"},
		{name: "file pods alone run as they are",
			files: []*v1.Pod{pod("default", "web", "/m/web.yaml", privileged)},
			run:   []string{"default/web"}},
		{name: "a hub pod of another name runs after the file pods",
			files: []*v1.Pod{pod("default", "web", "/m/web.yaml")},
			hub:   []*v1.Pod{pod("default", "db", "")},
			run:   []string{"default/web", "default/db"}},
		{name: "a file pod of the same name wins",
			files:   []*v1.Pod{pod("default", "web", "/m/web.yaml")},
			hub:     []*v1.Pod{pod("default", "web", ""), pod("default", "db", "")},
			run:     []string{"default/web", "default/db"},
			refused: []refusal{{"default/web", shadowed, "pod default/web comes from the manifest file /m/web.yaml on the device"}}},
		{name: "the same name in another namespace is another pod",
			files: []*v1.Pod{pod("default", "web", "/m/web.yaml")},
			hub:   []*v1.Pod{pod("edge", "web", "")},
			run:   []string{"default/web", "edge/web"}},
		{name: "a shadowed pod is refused as shadowed even when the policy would refuse it too",
			files:   []*v1.Pod{pod("default", "web", "/m/web.yaml")},
			hub:     []*v1.Pod{pod("default", "web", "", hostPath)},
			run:     []string{"default/web"},
			refused: []refusal{{"default/web", shadowed, "/m/web.yaml"}}},
		{name: "the default hub policy (baseline) refuses host access",
			hub:     []*v1.Pod{pod("default", "peek", "", hostPath), pod("default", "ok", "")},
			run:     []string{"default/ok"},
			refused: []refusal{{"default/peek", byPolicy, "hostPath"}}},
		{name: "the device's policy for every pod holds for hub pods",
			hub:     []*v1.Pod{pod("default", "root", "", privileged)},
			policy:  Policy{ForbidPrivileged: true},
			refused: []refusal{{"default/root", byPolicy, "security.forbidPrivileged"}}},
		{name: "an unknown priority class is refused, a known one resolved",
			hub:     []*v1.Pod{pod("default", "vip", "", class("gold")), pod("default", "sys", "", class(priority.SystemNodeCriticalName))},
			run:     []string{"default/sys"},
			refused: []refusal{{"default/vip", byPriority, `pod "vip": spec.priorityClassName: no PriorityClass with name "gold"`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run, refused := desiredPods(tc.files, tc.hub, tc.policy, priority.Builtin())
			var names []string
			for _, p := range run {
				names = append(names, p.Namespace+"/"+p.Name)
			}
			if strings.Join(names, " ") != strings.Join(tc.run, " ") {
				t.Errorf("run %v, want %v", names, tc.run)
			}
			if len(refused) != len(tc.refused) {
				t.Fatalf("refused %+v, want %+v", refused, tc.refused)
			}
			for i, want := range tc.refused {
				got := refused[i]
				if key := got.pod.Namespace + "/" + got.pod.Name; key != want.pod || got.cause != want.cause || !strings.Contains(got.reason, want.reason) {
					t.Errorf("refusal %d: %s cause %d %q, want %s cause %d containing %q", i, key, got.cause, got.reason, want.pod, want.cause, want.reason)
				}
			}
		})
	}
}

// The hub pods that run are resolved copies: the hub's own are left as
// they came, and file pods are passed through untouched.
func TestDesiredPodsResolvesCopies(t *testing.T) {
	file := pod("default", "web", "/m/web.yaml")
	hub := pod("default", "sys", "", class(priority.SystemNodeCriticalName))
	run, _ := desiredPods([]*v1.Pod{file}, []*v1.Pod{hub}, Policy{}, priority.Builtin())
	if run[0] != file {
		t.Errorf("the file pod was copied")
	}
	if run[1] == hub || hub.Spec.Priority != nil {
		t.Errorf("the hub's pod was changed in place")
	}
	if p := run[1].Spec.Priority; p == nil || *p != priority.SystemNodeCritical {
		t.Errorf("priority %v, want %d", p, priority.SystemNodeCritical)
	}
}
