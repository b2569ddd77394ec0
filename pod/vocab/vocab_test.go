package vocab

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func TestInstanceIDRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		id        string
		uid       types.UID
		container string
		attempt   int
		ok        bool
	}{
		{id: "u1_web_3", uid: "u1", container: "web", attempt: 3, ok: true},
		{id: "u1_my_side_car_0", uid: "u1", container: "my_side_car", attempt: 0, ok: true},
		{id: "u1_web", ok: false},       // no attempt
		{id: "u1_web_x", ok: false},     // attempt not a number
		{id: "nounderscore", ok: false}, // nothing to split
		{id: "", ok: false},
	} {
		uid, c, n, ok := ParseInstanceID(tc.id)
		if ok != tc.ok || uid != tc.uid || c != tc.container || n != tc.attempt {
			t.Errorf("ParseInstanceID(%q) = %q %q %d %v, want %q %q %d %v", tc.id, uid, c, n, ok, tc.uid, tc.container, tc.attempt, tc.ok)
		}
		if tc.ok && InstanceID(tc.uid, tc.container, tc.attempt) != tc.id {
			t.Errorf("InstanceID does not give back %q", tc.id)
		}
	}
}

func TestQOSClassAndPriority(t *testing.T) {
	q := resource.MustParse
	res := func(req, lim v1.ResourceList) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: req, Limits: lim}
	}
	cpuMem := v1.ResourceList{v1.ResourceCPU: q("100m"), v1.ResourceMemory: q("64Mi")}
	prio := int32(7)
	for _, tc := range []struct {
		name string
		res  v1.ResourceRequirements
		want v1.PodQOSClass
	}{
		{"none", res(nil, nil), v1.PodQOSBestEffort},
		{"equal requests and limits", res(cpuMem, cpuMem), v1.PodQOSGuaranteed},
		{"limits only (requests default to them)", res(nil, cpuMem), v1.PodQOSGuaranteed},
		{"requests only", res(cpuMem, nil), v1.PodQOSBurstable},
		{"memory limit only", res(nil, v1.ResourceList{v1.ResourceMemory: q("64Mi")}), v1.PodQOSBurstable},
	} {
		p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: tc.res}}}}
		if got := QOSClass(p); got != tc.want {
			t.Errorf("%s: QOSClass = %s, want %s", tc.name, got, tc.want)
		}
	}
	if Priority(&v1.Pod{}) != 0 || Priority(&v1.Pod{Spec: v1.PodSpec{Priority: &prio}}) != 7 {
		t.Error("Priority: unset must be 0, set must be itself")
	}
	always := v1.ContainerRestartPolicyAlways
	if !IsSidecar(&v1.Container{RestartPolicy: &always}) || IsSidecar(&v1.Container{}) {
		t.Error("IsSidecar: only restartPolicy Always makes a sidecar")
	}
}
