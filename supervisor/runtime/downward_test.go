package runtime

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func quantities(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// The values of the node e2e tests (downwardapi.go, downwardapi_volume.go)
// and of the kubelet's helpers: rounded up, in divisor units, with the
// node's allocatable amount for an unset limit.
func TestResourceValue(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "app", Resources: v1.ResourceRequirements{
			Limits:   quantities("cpu", "1250m", "memory", "64Mi", "ephemeral-storage", "1Gi"),
			Requests: quantities("cpu", "250m", "memory", "32Mi", "ephemeral-storage", "100M")}},
		{Name: "bare"},
	}}}
	allocatable := quantities("cpu", "3", "memory", "2Gi", "ephemeral-storage", "10G")
	app, bare := &pod.Spec.Containers[0], &pod.Spec.Containers[1]
	for _, tc := range []struct {
		c                  *v1.Container
		ref, divisor, want string
		container          string
	}{
		{c: app, ref: "limits.cpu", want: "2"},
		{c: app, ref: "limits.cpu", divisor: "1m", want: "1250"},
		{c: app, ref: "requests.cpu", want: "1"},
		{c: app, ref: "requests.cpu", divisor: "1m", want: "250"},
		{c: app, ref: "limits.memory", want: "67108864"},
		{c: app, ref: "limits.memory", divisor: "1Mi", want: "64"},
		{c: app, ref: "requests.memory", divisor: "1M", want: "34"}, // 33554432/1e6 rounded up
		{c: app, ref: "limits.ephemeral-storage", divisor: "1Mi", want: "1024"},
		{c: app, ref: "requests.ephemeral-storage", divisor: "1k", want: "100000"},
		// No limit: the node's allocatable. No request: zero.
		{c: bare, ref: "limits.cpu", want: "3"},
		{c: bare, ref: "limits.memory", divisor: "1Mi", want: "2048"},
		{c: bare, ref: "limits.ephemeral-storage", divisor: "1G", want: "10"},
		{c: bare, ref: "requests.cpu", want: "0"},
		{c: bare, ref: "requests.memory", want: "0"},
		// Another container, by name.
		{c: bare, container: "app", ref: "limits.cpu", divisor: "1m", want: "1250"},
	} {
		fs := &v1.ResourceFieldSelector{ContainerName: tc.container, Resource: tc.ref}
		if tc.divisor != "" {
			fs.Divisor = resource.MustParse(tc.divisor)
		}
		got, err := ResourceValue(fs, pod, tc.c, allocatable)
		if err != nil || got != tc.want {
			t.Errorf("%s %s divisor %q: %q, %v; want %q", tc.c.Name, tc.ref, tc.divisor, got, err, tc.want)
		}
	}
	if _, err := ResourceValue(&v1.ResourceFieldSelector{ContainerName: "nope", Resource: "limits.cpu"}, pod, app, allocatable); err == nil {
		t.Error("an unknown container was accepted")
	}
	if _, err := ResourceValue(&v1.ResourceFieldSelector{Resource: "limits.gpu"}, pod, app, allocatable); err == nil {
		t.Error("an unknown resource was accepted")
	}
	if len(app.Resources.Limits) != 3 || len(bare.Resources.Limits) != 0 {
		t.Error("ResourceValue changed the pod's limits")
	}
}

// Env vars get the kubelet's values: plural IP fields comma-separated,
// resources computed as above.
func TestResolveDownwardEnv(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{}, Containers: []v1.Container{{
		Name: "app", Command: []string{"env"},
		Resources: v1.ResourceRequirements{Limits: quantities("memory", "64Mi")},
		Env: []v1.EnvVar{
			{Name: "POD_IPS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
			{Name: "HOST_IPS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIPs"}}},
			{Name: "CPU_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1m")}}},
			{Name: "MEMORY_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory"}}},
			{Name: "ECHO", Value: "$(MEMORY_LIMIT)"},
		},
	}}}}
	s, err := Resolve(pod, &pod.Spec.Containers[0], PodEnv{HostIP: "10.0.0.2", Allocatable: quantities("cpu", "2")})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POD_IPS=10.0.0.2", "HOST_IPS=10.0.0.2", "CPU_LIMIT=2000", "MEMORY_LIMIT=67108864", "ECHO=67108864"} {
		if !slices.Contains(s.Env, want) {
			t.Errorf("env %q lacks %s", s.Env, want)
		}
	}
}

// The kubelet's truncatePodHostnameIfNeeded cases.
func TestPodHostname(t *testing.T) {
	long := "1234567.1234567" // 15 characters
	for _, tc := range []struct{ name, hostname, want string }{
		{name: "web", want: "web"},
		{name: "web", hostname: "front", want: "front"},
		{name: strings.Repeat(long, 4) + "-tail", want: strings.Repeat(long, 4) + "-ta"[:3]},
		{name: strings.Repeat(long, 4) + "123-", want: strings.Repeat(long, 4) + "123"},
		{name: strings.Repeat(long, 4) + "12.-4567", want: strings.Repeat(long, 4) + "12"},
		{name: strings.Repeat("a", 62) + "--b", want: strings.Repeat("a", 62)},
	} {
		pod := &v1.Pod{}
		pod.Name, pod.Spec.Hostname = tc.name, tc.hostname
		if got := PodHostname(pod); got != tc.want || len(got) > 63 {
			t.Errorf("%q/%q: %q, want %q", tc.name, tc.hostname, got, tc.want)
		}
	}
}
