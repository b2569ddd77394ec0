package podprobes

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Only pods with a tcpSocket, httpGet or grpc startup or readiness probe
// (named ports resolved) are worth a watched cgroup.
func TestListenProbed(t *testing.T) {
	tcp := func(port intstr.IntOrString) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: port}}}
	}
	ports := []v1.ContainerPort{{Name: "web", ContainerPort: 8080}}
	for _, tc := range []struct {
		name string
		c    v1.Container
		want bool
	}{
		{"readiness tcp", v1.Container{ReadinessProbe: tcp(intstr.FromInt(80))}, true},
		{"startup http by name", v1.Container{Ports: ports, StartupProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{
			HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("web")}}}}, true},
		{"readiness grpc", v1.Container{ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9090}}}}, true},
		{"liveness only", v1.Container{LivenessProbe: tcp(intstr.FromInt(80))}, false},
		{"exec readiness", v1.Container{ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}}, false},
		{"unknown port name", v1.Container{ReadinessProbe: tcp(intstr.FromString("nope"))}, false},
		{"no probes", v1.Container{}, false},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{tc.c}}}
		if got := listenProbed(pod); got != tc.want {
			t.Errorf("%s: listenProbed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
