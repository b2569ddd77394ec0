package podprobes

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/probes/listen"
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

// A sweep's failures are said once each; a pod unwatched since is not.
func TestRescanFailuresSaidOnce(t *testing.T) {
	var out bytes.Buffer
	l := &listenProbes{log: slog.New(slog.NewTextHandler(&out, nil))}
	logged := map[string]bool{}
	unwatched := fmt.Errorf("cgroup 7 is %w", listen.ErrNotWatched)
	failed := errors.New("rescan cgroup /sys/fs/cgroup/unified/pod-b: sock_diag socket in /proc/42/ns/net: invalid argument")
	for range 3 {
		l.rescanFailed(errors.Join(unwatched, failed), logged)
	}
	l.rescanFailed(unwatched, logged)
	if n := strings.Count(out.String(), "could not be dumped"); n != 1 || !strings.Contains(out.String(), "/proc/42/ns/net") || strings.Contains(out.String(), "cgroup 7") {
		t.Fatalf("logged %d times, want the dump failure once and nothing of the unwatched cgroup:\n%s", n, out.String())
	}
}
