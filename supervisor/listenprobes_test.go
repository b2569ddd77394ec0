package supervisor

import (
	"testing"
	"time"

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

// Slow dumps move to the whole second before them, so idle pods dump in
// one wake-up; dumps due within two seconds (the burst after a start)
// keep their time.
func TestSlowDumpsTogether(t *testing.T) {
	now := time.Unix(1000, 300_000_000)
	for _, tc := range []struct {
		name string
		at   time.Time
		want time.Time
	}{
		{"slow dump", time.Unix(1010, 300_000_000), time.Unix(1010, 0)},
		{"slow dump of another pod", time.Unix(1009, 900_000_000), time.Unix(1009, 0)},
		{"burst dump", now.Add(time.Second), now.Add(time.Second)},
		{"due now", now, now},
	} {
		if got := slowDumpsTogether(tc.at, now); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
