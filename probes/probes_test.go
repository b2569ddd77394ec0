package probes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

var target = Target{Host: "127.0.0.1", Env: []string{"PATH=/usr/bin:/bin"}}

func TestCounterThresholds(t *testing.T) {
	c := newCounter(&v1.Probe{SuccessThreshold: 2, FailureThreshold: 3}, lifecycle.Readiness)
	steps := []struct {
		ok      bool
		changed bool
	}{
		{true, false}, {true, true}, // two successes to become ready
		{false, false}, {true, false}, {false, false}, {false, false}, {false, true}, // three failures in a row
		{false, false},
	}
	for i, s := range steps {
		if got := c.observe(s.ok); got != s.changed {
			t.Fatalf("step %d (ok=%v): changed=%v, want %v", i, s.ok, got, s.changed)
		}
	}
}

func TestExec(t *testing.T) {
	if err := Exec(context.Background(), target, []string{"true"}, time.Second); err != nil {
		t.Fatal(err)
	}
	err := Exec(context.Background(), target, []string{"sh", "-c", "echo broken >&2; exit 3"}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v", err)
	}
}

func TestExecTimeoutLeavesNothingBehind(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	begin := time.Now()
	// 2 s: room for sh to fork its child and write the pid on a busy
	// machine; still far under the command's 100 s.
	err := Exec(context.Background(), target, []string{"sh", "-c", "sleep 100 & echo $! > " + pidfile + "; sleep 100"}, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err = %v", err)
	}
	// The command runs 100 s: a return long before that is the timeout's
	// kill, not the command ending (how long after 2 s is a figure).
	took := time.Since(begin)
	t.Logf("a 2s timeout returned after %v", took)
	if took > 30*time.Second {
		t.Fatalf("a 2s timeout returned after %v: it waited for the command", took)
	}
	data, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid == 0 || !dead(pid, time.Second) {
		t.Fatalf("background child %d of a timed-out probe survived", pid)
	}
	// And the probe's own process was reaped: no zombie children remain.
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", os.Getpid()))
	for _, f := range strings.Fields(string(kids)) {
		stat, _ := os.ReadFile("/proc/" + f + "/stat")
		if strings.Contains(string(stat), ") Z ") {
			t.Fatalf("zombie child %s", f)
		}
	}
}

func TestHTTPGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			if r.Host != "app.local" || r.Header.Get("X-Probe") != "1" {
				w.WriteHeader(http.StatusBadRequest)
			}
		case "/moved":
			http.Redirect(w, r, "/healthz", http.StatusFound)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	tg := target
	tg.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
	headers := []v1.HTTPHeader{{Name: "Host", Value: "app.local"}, {Name: "X-Probe", Value: "1"}}
	ok := &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"), HTTPHeaders: headers}
	if err := HTTPGet(context.Background(), tg, ok, time.Second); err != nil {
		t.Fatalf("healthy endpoint by port name: %v", err)
	}
	bad := &v1.HTTPGetAction{Path: "/down", Port: intstr.FromInt32(int32(port))}
	if err := HTTPGet(context.Background(), tg, bad, time.Second); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503 must fail: %v", err)
	}
	noName := &v1.HTTPGetAction{Path: "/", Port: intstr.FromString("nope")}
	if err := HTTPGet(context.Background(), tg, noName, time.Second); err == nil {
		t.Fatal("unknown port name accepted")
	}
}

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	a := &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}
	if err := TCP(context.Background(), target, a, time.Second); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := TCP(context.Background(), target, a, time.Second); err == nil {
		t.Fatal("closed port succeeded")
	}
}

func TestGRPCAgainstTheRealHealthServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	defer srv.Stop()
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	svc := "podvisor.test.Echo"
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	if err := GRPC(context.Background(), target, &v1.GRPCAction{Port: port}, time.Second); err != nil {
		t.Fatalf("overall health: %v", err)
	}
	if err := GRPC(context.Background(), target, &v1.GRPCAction{Port: port, Service: &svc}, time.Second); err != nil {
		t.Fatalf("named service: %v", err)
	}
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	if err := GRPC(context.Background(), target, &v1.GRPCAction{Port: port, Service: &svc}, time.Second); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Fatalf("NOT_SERVING must fail: %v", err)
	}
	unknown := "no.such.Service"
	if err := GRPC(context.Background(), target, &v1.GRPCAction{Port: port, Service: &unknown}, time.Second); err == nil || !strings.Contains(err.Error(), "code = 5") {
		t.Fatalf("unknown service must fail with NotFound: %v", err)
	}
}

func TestManagerGatesOnStartupAndReports(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := intstr.FromInt32(int32(ln.Addr().(*net.TCPAddr).Port))
	ln.Close() // not listening yet: startup fails for a while
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx)
	m.TimeUnit = 10 * time.Millisecond
	tcp := v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: port}}
	// A closed port refuses at once; the timeout (100 units: 1 s) is
	// long so that a descheduled dial to the open port is not a failure:
	// the test is about gating and reporting, not timeouts.
	c := &v1.Container{Name: "app",
		StartupProbe:   &v1.Probe{ProbeHandler: tcp, PeriodSeconds: 1, TimeoutSeconds: 100, SuccessThreshold: 1, FailureThreshold: 100},
		ReadinessProbe: &v1.Probe{ProbeHandler: tcp, PeriodSeconds: 1, TimeoutSeconds: 100, SuccessThreshold: 1, FailureThreshold: 1},
		LivenessProbe:  &v1.Probe{ProbeHandler: tcp, PeriodSeconds: 1, TimeoutSeconds: 100, SuccessThreshold: 1, FailureThreshold: 2},
	}
	m.Start("inst", c, target)
	select {
	case r := <-m.Results():
		t.Fatalf("verdict before the port opened: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	ln, err = net.Listen("tcp", "127.0.0.1:"+port.String())
	if err != nil {
		t.Fatal(err)
	}
	want := []lifecycle.ProbeKind{lifecycle.Startup, lifecycle.Readiness}
	for _, k := range want {
		r := next(t, m)
		if r.Kind != k || !r.OK {
			t.Fatalf("got %+v, want %s OK", r, k)
		}
	}
	ln.Close()
	got := map[lifecycle.ProbeKind]bool{}
	for len(got) < 2 {
		r := next(t, m)
		if r.OK {
			t.Fatalf("unexpected success %+v", r)
		}
		got[r.Kind] = true
	}
	if !got[lifecycle.Liveness] || !got[lifecycle.Readiness] {
		t.Fatalf("failures seen: %v", got)
	}
	m.Stop("inst")
	if m.Running() != 0 {
		t.Fatal("stop left workers registered")
	}
}

func next(t *testing.T, m *Manager) Result {
	t.Helper()
	select {
	case r := <-m.Results():
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no probe result within 5s")
		return Result{}
	}
}

// dead waits for a process to be gone or a zombie (killed, awaiting its
// new parent's reap).
func dead(pid int, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return true
		}
	}
	return syscall.Kill(pid, 0) != nil
}
