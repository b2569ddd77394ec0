package hooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// inContainer is a runtime whose containers run commands inside
// themselves: it answers each Exec with code and output, and records
// what it was asked. Only Exec and NetNS are ever called.
type inContainer struct {
	runtime.Runtime
	netns  string
	code   int
	output string
	err    error
	execs  chan []string // "<instance ID>" followed by the command
}

func (f *inContainer) Exec(id string, command []string, _ time.Duration) (int, string, error) {
	f.execs <- append([]string{id}, command...)
	return f.code, f.output, f.err
}

func (f *inContainer) NetNS(*v1.Pod) string { return f.netns }

// hostRuntime runs its containers on the host: hooks run as the daemon's
// children and dial from the host's network.
type hostRuntime struct{ runtime.Runtime }

func instance(c v1.Container) *lifecycle.Instance {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{c}, SecurityContext: &v1.PodSecurityContext{}},
	}
	return &lifecycle.Instance{Pod: pod, Containers: []*lifecycle.Container{{Name: c.Name, InstanceID: "u1_" + c.Name + "_0"}}}
}

func runHook(in *lifecycle.Instance, hook lifecycle.HookKind, timeout time.Duration) lifecycle.Action {
	c := in.Containers[0]
	return lifecycle.Action{Kind: lifecycle.RunHook, Pod: in.Pod.UID, Container: c.Name, InstanceID: c.InstanceID, Hook: hook, Timeout: timeout}
}

func newRunner(rt runtime.Runtime, node runtime.PodEnv) *Runner {
	return New(Options{Node: func(*v1.Pod) runtime.PodEnv { return node }, RuntimeOf: func(*v1.Pod) runtime.Runtime { return rt }})
}

func execHandler(command ...string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: command}}
}

func TestRunsTheActionsHookInItsContainer(t *testing.T) {
	in := instance(v1.Container{Name: "app", Lifecycle: &v1.Lifecycle{
		PostStart: execHandler("warm-up"), PreStop: execHandler("drain"),
	}})
	for _, tc := range []struct {
		hook lifecycle.HookKind
		want []string
	}{
		{lifecycle.PostStart, []string{"u1_app_0", "warm-up"}},
		{lifecycle.PreStop, []string{"u1_app_0", "drain"}},
	} {
		rt := &inContainer{execs: make(chan []string, 1)}
		r := newRunner(rt, runtime.PodEnv{})
		r.Run(in, runHook(in, tc.hook, 0))
		res := <-r.Results()
		if got := <-rt.execs; !slices.Equal(got, tc.want) {
			t.Errorf("%s: exec %v, want %v", tc.hook, got, tc.want)
		}
		want := Result{Pod: "u1", Container: "app", InstanceID: "u1_app_0", Hook: tc.hook}
		if res != want {
			t.Errorf("%s: result %+v, want %+v", tc.hook, res, want)
		}
	}
}

func TestReportsAFailedHook(t *testing.T) {
	in := instance(v1.Container{Name: "app", Lifecycle: &v1.Lifecycle{PostStart: execHandler("warm-up")}})
	rt := &inContainer{code: 3, output: "not ready\n", execs: make(chan []string, 1)}
	r := newRunner(rt, runtime.PodEnv{})
	r.Run(in, runHook(in, lifecycle.PostStart, 0))
	res := <-r.Results()
	if res.Err == nil || res.Err.Error() != `command "warm-up": exit status 3: not ready` {
		t.Errorf("err = %v, want the command's exit status and output", res.Err)
	}
}

func TestReportsAnUnresolvableTargetAtOnce(t *testing.T) {
	in := instance(v1.Container{Name: "app", Lifecycle: &v1.Lifecycle{PostStart: execHandler("warm-up")},
		Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.nothing"}}}}})
	rt := &inContainer{execs: make(chan []string, 1)}
	r := newRunner(rt, runtime.PodEnv{})
	r.Run(in, runHook(in, lifecycle.PostStart, 0))
	select {
	case res := <-r.Results():
		if res.Err == nil || res.InstanceID != "u1_app_0" || res.Hook != lifecycle.PostStart {
			t.Errorf("result %+v, want the postStart's failure", res)
		}
	default:
		t.Fatal("no result right after Run: an unresolvable target must be reported at once")
	}
	if len(rt.execs) != 0 {
		t.Error("the hook ran although its target could not be resolved")
	}
}

func TestEndCancelsTheInstancesRunningHooks(t *testing.T) {
	sleep := &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 3600}}}
	first, second := instance(v1.Container{Name: "a", Lifecycle: sleep}), instance(v1.Container{Name: "b", Lifecycle: sleep})
	r := newRunner(&hostRuntime{}, runtime.PodEnv{})
	r.Run(first, runHook(first, lifecycle.PostStart, 0)) // no timeout: it ends with its instance
	r.Run(second, runHook(second, lifecycle.PostStart, 0))
	r.End("u1_b_0")
	res := <-r.Results()
	if res.InstanceID != "u1_b_0" || !errors.Is(res.Err, context.Canceled) {
		t.Errorf("result %+v, want u1_b_0's hook canceled", res)
	}
	r.End("u1_b_0") // an instance with no hook left: nothing to do
	r.End("u1_a_0")
	if res := <-r.Results(); res.InstanceID != "u1_a_0" || !errors.Is(res.Err, context.Canceled) {
		t.Errorf("result %+v, want u1_a_0's hook canceled", res)
	}
	if len(r.cancels) != 0 {
		t.Errorf("cancels left: %v", r.cancels)
	}
}

func TestPassesOnTheHTTPFallbackWarning(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	in := instance(v1.Container{Name: "app", Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
		HTTPGet: &v1.HTTPGetAction{Path: "/stop", Port: intstr.FromInt(port), Scheme: v1.URISchemeHTTPS},
	}}})
	r := newRunner(&hostRuntime{}, runtime.PodEnv{})
	r.Run(in, runHook(in, lifecycle.PreStop, 30*time.Second))
	res := <-r.Results()
	want := "request to HTTPS lifecycle hook " + u.Host + " got HTTP response, retry with HTTP succeeded"
	if res.Err != nil || res.Warning != want {
		t.Errorf("result %+v, want no error and warning %q", res, want)
	}
}

func TestHookTimeout(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, noHookTimeout}, {-time.Second, noHookTimeout}, {5 * time.Second, 5 * time.Second},
	} {
		if got := hookTimeout(tc.in); got != tc.want {
			t.Errorf("hookTimeout(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestTarget(t *testing.T) {
	uid := int64(1000)
	in := instance(v1.Container{Name: "app", WorkingDir: "/srv",
		Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		Env:   []v1.EnvVar{{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
	})
	in.Pod.Spec.NodeName = "edge-1"
	in.Pod.Spec.SecurityContext.RunAsUser = &uid
	node := runtime.PodEnv{NodeName: "edge-1"}
	r := New(Options{Node: func(*v1.Pod) runtime.PodEnv { return node }, RuntimeOf: func(*v1.Pod) runtime.Runtime { return &hostRuntime{} }})

	tg, err := r.Target(in, "app")
	if err != nil {
		t.Fatal(err)
	}
	if tg.Host != "127.0.0.1" || tg.Dir != "/srv" || tg.UID == nil || *tg.UID != 1000 || !slices.Equal(tg.Ports, in.Pod.Spec.Containers[0].Ports) {
		t.Errorf("target %+v: want loopback, the container's directory, user and ports", tg)
	}
	if !slices.Contains(tg.Env, "NODE=edge-1") {
		t.Errorf("env %v: want the downward API's node name", tg.Env)
	}
	if tg.ExecIn != nil || tg.DialIn != nil {
		t.Error("a host runtime's container: commands must run and dials go from the host")
	}

	ic := &inContainer{code: 0, output: "ok", execs: make(chan []string, 1)}
	r = newRunner(ic, node)
	if tg, _ = r.Target(in, "app"); tg.ExecIn == nil || tg.DialIn != nil {
		t.Fatalf("in a container on the host's network: want ExecIn and no DialIn, got %+v", tg)
	}
	if code, out, err := tg.ExecIn(context.Background(), []string{"true"}, time.Second); code != 0 || out != "ok" || err != nil {
		t.Errorf("ExecIn = %d, %q, %v", code, out, err)
	}
	if got := <-ic.execs; !slices.Equal(got, []string{"u1_app_0", "true"}) {
		t.Errorf("exec %v: want the container's instance", got)
	}
	ic.netns = "/run/netns/web"
	if tg, _ = r.Target(in, "app"); tg.DialIn == nil {
		t.Error("a pod with its own network: want DialIn")
	}

	// A command the runtime could not run is a probe's unknown result; a
	// timeout is not (it is a failure).
	ic.err = errors.New("containerd: connection refused")
	if _, _, err := tg.ExecIn(context.Background(), []string{"true"}, time.Second); !errors.Is(err, probes.ErrUnknown) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a runtime error: %v, want probes.ErrUnknown wrapping it", err)
	}
	<-ic.execs
	ic.err = fmt.Errorf("%w after 1s", runtime.ErrExecTimedOut)
	if _, _, err := tg.ExecIn(context.Background(), []string{"true"}, time.Second); errors.Is(err, probes.ErrUnknown) || !errors.Is(err, runtime.ErrExecTimedOut) {
		t.Errorf("a timeout: %v, want runtime.ErrExecTimedOut and not unknown", err)
	}
	<-ic.execs
}

// nsRuntime runs containers on the host, those with volumes in a mount
// namespace of their own; MountNS records what it was asked.
type nsRuntime struct {
	runtime.Runtime
	asked []string
}

func (f *nsRuntime) MountNS(id string) (*os.File, error) {
	f.asked = append(f.asked, id)
	return nil, nil
}

// A process container with volumes has its commands run in its own
// mount namespace, opened at each command; one without runs on the host.
func TestTargetJoinsTheContainersMountNamespace(t *testing.T) {
	in := instance(v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}}})
	rt := &nsRuntime{}
	tg, err := newRunner(rt, runtime.PodEnv{}).Target(in, "app")
	if err != nil || tg.MountNS == nil {
		t.Fatalf("target %+v, %v: want MountNS", tg, err)
	}
	tg.MountNS()
	tg.MountNS()
	if !slices.Equal(rt.asked, []string{"u1_app_0", "u1_app_0"}) {
		t.Errorf("MountNS asked for %v: want the instance, at each command", rt.asked)
	}
	plain := instance(v1.Container{Name: "app"})
	if tg, _ := newRunner(rt, runtime.PodEnv{}).Target(plain, "app"); tg.MountNS != nil {
		t.Error("a container without volumes: its commands must run in the host's namespace")
	}
}

// startedRuntime keeps the process each instance started with.
type startedRuntime struct {
	runtime.Runtime
	started map[string]runtime.Process
}

func (f *startedRuntime) StartedProcess(id string) (runtime.Process, error) {
	if p, ok := f.started[id]; ok {
		return p, nil
	}
	return runtime.Process{}, errors.New("no such instance")
}

// Commands of a container whose runtime keeps the process it started
// with run in that environment (its Secrets as they were, known before
// a restarted daemon has its objects again); one it does not know gets
// the environment resolved now, and an unresolvable one says why.
func TestTargetTakesTheStartedEnvironment(t *testing.T) {
	in := instance(v1.Container{Name: "app", Env: []v1.EnvVar{{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "pw"}}}}})
	uid := uint32(7)
	rt := &startedRuntime{started: map[string]runtime.Process{"u1_app_0": {Env: []string{"PW=then"}, Dir: "/srv", UID: &uid}}}
	tg, err := newRunner(rt, runtime.PodEnv{}).Target(in, "app") // no objects: "db" is not found
	if err != nil || !slices.Equal(tg.Env, []string{"PW=then"}) || tg.Dir != "/srv" || tg.UID == nil || *tg.UID != 7 {
		t.Fatalf("target %+v, %v: want the started process's", tg, err)
	}
	in.Containers[0].InstanceID = "u1_app_1"
	if _, err := newRunner(rt, runtime.PodEnv{}).Target(in, "app"); err == nil || err.Error() != `secret "db" not found` {
		t.Fatalf("an instance the runtime does not know: %v", err)
	}
}
