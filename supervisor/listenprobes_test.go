package supervisor

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
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

// The daemon says which run changed a probe's verdict, a listen event's
// or the period's: what tells listen-driven readiness from the period
// without timing it.
func TestProbeVerdictSaysWhichRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	st := desireWebPod(t, d, `  - {name: app, image: host}`)
	var in *lifecycle.Instance
	runUntil(t, d, "the container runs", func() bool {
		in = d.machine.Instance(st.Pods[0].UID)
		return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
	})
	var log bytes.Buffer
	d.log = slog.New(slog.NewTextHandler(&log, nil))
	id := in.Container("app").InstanceID
	d.probed(probes.Result{InstanceID: id, Kind: vocab.Readiness, OK: true, Listen: true})
	d.probed(probes.Result{InstanceID: id, Kind: vocab.Readiness, OK: false})
	for _, want := range []string{
		`msg="probe verdict" pod=default/web container=app probe=Readiness ok=true run="listen event"`,
		`msg="probe verdict" pod=default/web container=app probe=Readiness ok=false run=period`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, log.String())
		}
	}
}
