package runtime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A pod runs under the runtime its class names; a pod that names none,
// or a class no runtime registered, runs under the fallback, as pods
// without runtimeClassName: process run on containerd. A class without a
// runtime on the device is an error that says why.
func TestRegistryResolvesRuntimeClasses(t *testing.T) {
	type named struct{ Runtime }
	var proc, ctr Runtime = &named{}, &named{}
	r := NewRegistry("containerd")
	r.Register("process", proc)
	pod := func(class string) *v1.Pod {
		p := &v1.Pod{}
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		return p
	}
	r.Unavailable("containerd", "containerd is not configured on this device")
	for _, tc := range []struct {
		class, want, err string
		rt               Runtime
	}{
		{class: "process", want: "process", rt: proc},
		{class: "", want: "containerd", err: "containerd is not configured on this device"},
		{class: "gvisor", want: "containerd", err: "containerd is not configured on this device"},
	} {
		if got := r.ClassOf(pod(tc.class)); got != tc.want {
			t.Errorf("class %q: ClassOf = %q, want %q", tc.class, got, tc.want)
		}
		rt, err := r.For(pod(tc.class))
		if rt != tc.rt || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("class %q: For = %v, %v; want %v, %q", tc.class, rt, err, tc.rt, tc.err)
		}
	}
	r.Register("containerd", ctr)
	if rt, err := r.For(pod("")); rt != ctr || err != nil {
		t.Errorf("registered fallback: For = %v, %v", rt, err)
	}
	if got := r.Classes(); strings.Join(got, ",") != "containerd,process" {
		t.Errorf("Classes = %v", got)
	}
	rebuilt := pod("")
	r.Claim(rebuilt, "process")
	if r.ClassOf(rebuilt) != "process" {
		t.Errorf("a pod claimed for process runs under %q", r.ClassOf(rebuilt))
	}
	untouched := pod("")
	r.Claim(untouched, "containerd")
	if untouched.Spec.RuntimeClassName != nil {
		t.Errorf("claiming the fallback class set %q; a pod that names none already runs there", *untouched.Spec.RuntimeClassName)
	}
	if rt, err := NewRegistry("x").For(pod("")); rt != nil || err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("no runtime at all: %v, %v", rt, err)
	}
}
