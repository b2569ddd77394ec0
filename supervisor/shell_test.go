package supervisor

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/podprobes"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// fakeRuntime records what the daemon asks of it and ends instances
// when told to. It starts every instance at once.
type fakeRuntime struct {
	exits    chan runtime.Exit
	removals chan string

	mu        sync.Mutex
	started   []string
	signals   map[string]syscall.Signal
	removed   []string
	forgotten []types.UID
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{exits: make(chan runtime.Exit, 16), removals: make(chan string, 16), signals: map[string]syscall.Signal{}}
}

func (f *fakeRuntime) Start(c *runtime.Container, done func(runtime.Started)) {
	f.mu.Lock()
	f.started = append(f.started, c.InstanceID)
	f.mu.Unlock()
	done(runtime.Started{At: time.Now()})
}

func (f *fakeRuntime) Signal(id string, sig syscall.Signal) error {
	f.mu.Lock()
	f.signals[id] = sig
	f.mu.Unlock()
	f.end(id, 0, 15)
	return nil
}

func (f *fakeRuntime) Kill(id string) error { f.end(id, 137, 9); return nil }

func (f *fakeRuntime) Remove(id string) error {
	f.mu.Lock()
	f.removed = append(f.removed, id)
	f.mu.Unlock()
	f.removals <- id
	return nil
}

func (f *fakeRuntime) Recover() ([]runtime.Found, error)             { return nil, nil }
func (f *fakeRuntime) Exits() <-chan runtime.Exit                    { return f.exits }
func (f *fakeRuntime) TerminationFile(string) string                 { return "" }
func (f *fakeRuntime) InstanceCgroup(*v1.Pod, string, string) string { return "" }
func (f *fakeRuntime) ExecTarget(*v1.Pod, string, string, runtime.PodEnv) (runtime.ExecTarget, error) {
	return runtime.ExecTarget{Runtime: "fake"}, nil
}

func (f *fakeRuntime) ForgetPod(uid types.UID) {
	f.mu.Lock()
	f.forgotten = append(f.forgotten, uid)
	f.mu.Unlock()
}

// end reports that an instance ended.
func (f *fakeRuntime) end(id string, code, signal int32) {
	now := time.Now()
	f.exits <- runtime.Exit{InstanceID: id, ExitCode: code, Signal: signal, StartedAt: now, FinishedAt: now}
}

func (f *fakeRuntime) snapshot() (started []string, removed []string, forgotten []types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.started...), append([]string(nil), f.removed...), append([]types.UID(nil), f.forgotten...)
}

// shellDaemon is a daemon whose pods run on fake: the shell without a
// process, cgroup or containerd of its own.
func shellDaemon(t *testing.T, ctx context.Context, fake runtime.Runtime) *Daemon {
	t.Helper()
	d, err := New(shellConfig(t), Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OpenState(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.state.Close)
	d.runtimes.Registry = runtime.NewRegistry("fake")
	d.runtimes.Register("fake", fake)
	forwarding := make(chan struct{})
	t.Cleanup(func() { close(forwarding) })
	if _, err := d.setupRuntimes(ctx.Done(), forwarding); err != nil {
		t.Fatal(err)
	}
	d.probing = podprobes.Open(ctx, podprobes.Options{Cgroups: d.cgroups, RuntimeOf: d.runtimes.Of, Log: d.log})
	t.Cleanup(d.probing.Close)
	d.protector = shellProtector(t, d, nodeprotect.Options{})
	return d
}

// shellConfig is the defaults in a temporary directory, without cgroups
// and with every save batched for an hour: only what an action waits on
// is saved before the test looks.
func shellConfig(t *testing.T) *config.Config {
	t.Helper()
	root := t.TempDir()
	cfg := config.Default()
	cfg.DataDir, cfg.Manifests, cfg.ConfigDir, cfg.NodeName = filepath.Join(root, "data"), filepath.Join(root, "manifests"), root, "dev"
	cfg.Cgroups.Root, cfg.SaveDelay, cfg.GC.MaxDeadContainers = "", time.Hour, 0
	if err := os.MkdirAll(cfg.Manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// shellProtector is node protection on the daemon's clock that arms no
// kernel notification: o's thresholds, observer and notifier, if any.
func shellProtector(t *testing.T, d *Daemon, o nodeprotect.Options) *nodeprotect.Protector {
	t.Helper()
	o.Log, o.Now = d.log, func() time.Time { return d.now() }
	o.DataDir, o.NodeName, o.HostIP = d.cfg.DataDir, d.cfg.NodeName, d.protector.PodEnv().HostIP
	o.Usage = podUsage(d.cgroups, d.retention)
	if o.ShutdownBuckets == nil {
		o.ShutdownBuckets = ShutdownBuckets(d.cfg)
	}
	p, err := nodeprotect.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runUntil runs the daemon's loop until cond holds, failing after a
// bound that only a stuck loop reaches.
func runUntil(t *testing.T, d *Daemon, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.loop(ctx, nil, cond)
	if !cond() {
		for _, in := range d.machine.Instances() {
			t.Logf("%s terminating=%v live=%v %+v", in.Key(), in.Terminating, in.Live(), in.Container("app"))
		}
		t.Fatalf("the daemon's loop ended before %s", what)
	}
}

// The shell drives a pod through start, exit, restart and stop on a
// runtime it knows only through runtime.Runtime.
func TestShellDrivesARuntime(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := newFakeRuntime()
	d := shellDaemon(t, ctx, fake)
	st := desireWebPod(t, d, `  - {name: app, image: host, command: [sleep, "1000"]}`)
	uid := st.Pods[0].UID
	running := func(starts int) func() bool {
		return func() bool {
			in := d.machine.Instance(uid)
			if in == nil || in.Container("app") == nil {
				return false
			}
			started, _, _ := fake.snapshot()
			return in.Container("app").Phase == lifecycle.Running && len(started) == starts
		}
	}

	runUntil(t, d, "the container runs", running(1))
	started, _, _ := fake.snapshot()
	if len(started) != 1 {
		t.Fatalf("started %v, want one instance", started)
	}
	first := started[0]

	fake.end(first, 3, 0)
	runUntil(t, d, "the container runs again after its exit", running(2))
	started, _, _ = fake.snapshot()
	if len(started) != 2 || started[1] == first {
		t.Fatalf("started %v, want a second, new instance", started)
	}
	pods, _, _ := d.API().Pods()
	cs := pods[0].Status.ContainerStatuses[0]
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
		t.Fatalf("status after the restart: restartCount %d, lastState %+v", cs.RestartCount, cs.LastTerminationState)
	}
	d.apply(d.machine.Flush()) // a removal waits until the exit is saved
	d.runtimes.FlushRemovals()
	select {
	case id := <-fake.removals:
		if id != first {
			t.Fatalf("removed %s, want the finished %s", id, first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the finished instance was not removed within 10s of its exit being saved")
	}

	d.setManifests(manifest.State{}) // as the manifest watch reports the file gone
	runUntil(t, d, "the pod is gone", func() bool { return d.machine.Instance(uid) == nil })
	fake.mu.Lock()
	sig, signalled := fake.signals[started[1]]
	fake.mu.Unlock()
	if !signalled || sig != 0 {
		t.Fatalf("stop signal %v (sent: %v), want 0: the runtime's default for a pod that names none", sig, signalled)
	}
	_, _, forgotten := fake.snapshot()
	if len(forgotten) != 1 || forgotten[0] != uid {
		t.Fatalf("forgotten pods %v, want %s", forgotten, uid)
	}
}

// With StopPodsOnExit the daemon stops its pods after its context ended:
// the runtimes' exits still reach it.
func TestShellStopsPodsAfterItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := newFakeRuntime()
	d := shellDaemon(t, ctx, fake)
	st := desireWebPod(t, d, `  - {name: app, image: host}`)
	runUntil(t, d, "the container runs", func() bool {
		in := d.machine.Instance(st.Pods[0].UID)
		return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
	})
	cancel() // the daemon was told to exit
	d.stopAll()
	if n := len(d.machine.Instances()); n != 0 {
		t.Fatalf("%d pods left after stopAll: their exits never arrived", n)
	}
}

// A pod whose runtime class has no runtime on the device waits with a
// reason that says why; nothing is started.
func TestShellRuntimeUnavailable(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := newFakeRuntime()
	d := shellDaemon(t, ctx, fake)
	d.runtimes.Registry = runtime.NewRegistry("gone")
	d.runtimes.Unavailable("gone", "runtime gone is not installed here")
	st := desireWebPod(t, d, `  - {name: app, image: host}`)
	uid := st.Pods[0].UID
	var waiting *v1.ContainerStateWaiting
	runUntil(t, d, "the container waits with a reason", func() bool {
		pods, _, _ := d.API().Pods()
		if len(pods) == 0 || pods[0].UID != uid || len(pods[0].Status.ContainerStatuses) == 0 {
			return false
		}
		waiting = pods[0].Status.ContainerStatuses[0].State.Waiting
		return waiting != nil && waiting.Reason == "CreateContainerError"
	})
	if waiting.Message != "runtime gone is not installed here" {
		t.Fatalf("waiting message %q", waiting.Message)
	}
	if started, _, _ := fake.snapshot(); len(started) != 0 {
		t.Fatalf("started %v on another runtime", started)
	}
}

// desireWebPod writes the manifest web.yaml with these container lines and
// hands the directory's state to the daemon, as its manifest watch would.
func desireWebPod(t *testing.T, d *Daemon, containers string) manifest.State {
	t.Helper()
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n" + containers + "\n"
	if err := os.WriteFile(filepath.Join(d.cfg.Manifests, "web.yaml"), []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := d.desired.Dir().Load()
	if err != nil || len(st.Pods) != 1 {
		t.Fatalf("manifest: %v, %d pods", err, len(st.Pods))
	}
	d.setManifests(st)
	return st
}

// hostRefusing is a runtime that refuses every pod for what the host
// lacks, until told it has it.
type hostRefusing struct {
	*fakeRuntime
	mu    sync.Mutex
	ready bool
}

func (h *hostRefusing) AdmitPod(*v1.Pod) (string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready {
		return "", ""
	}
	return "MountPathMissing", `container "app": volumeMount "cfg": mountPath /srv/cfg does not exist on the host`
}

// A pod its runtime refuses for what the host lacks waits Pending with
// the runtime's reason and message, nothing started, and starts once
// the runtime admits it.
func TestShellHostAdmission(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := &hostRefusing{fakeRuntime: newFakeRuntime()}
	d := shellDaemon(t, ctx, fake)
	d.machine.SetAdmitter(d.admitter(func(*v1.Pod, []*v1.Pod) lifecycle.Admission { return lifecycle.Admission{Admit: true} }))
	st := desireWebPod(t, d, `  - {name: app, image: host}`)
	var pending v1.PodStatus
	runUntil(t, d, "the pod is pending", func() bool {
		pods, _, _ := d.API().Pods()
		if len(pods) == 1 {
			pending = pods[0].Status
		}
		return pending.Reason != ""
	})
	if started, _, _ := fake.snapshot(); len(started) != 0 || pending.Phase != v1.PodPending ||
		pending.Reason != "MountPathMissing" || pending.Message == "" {
		t.Fatalf("status %+v, started %v: want Pending with the runtime's reason, nothing started", pending, started)
	}
	fake.mu.Lock()
	fake.ready = true
	fake.mu.Unlock()
	d.now = func() time.Time { return time.Now().Add(hostRecheck) } // the recheck is due
	runUntil(t, d, "the pod starts once admitted", func() bool {
		in := d.machine.Instance(st.Pods[0].UID)
		return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
	})
}
