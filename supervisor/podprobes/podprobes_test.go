package podprobes

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/probes/listen"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podcgroups"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// fakeWatcher is a listen watcher that watches nothing: it hands out ids
// and records what it was asked.
type fakeWatcher struct {
	path      listen.Path
	watched   []string // directories, in order
	unwatched []uint64
	events    chan listen.Event
}

func (w *fakeWatcher) Watch(dir string) (uint64, error) {
	w.watched = append(w.watched, dir)
	return uint64(len(w.watched)), nil
}
func (w *fakeWatcher) Unwatch(id uint64) error     { w.unwatched = append(w.unwatched, id); return nil }
func (w *fakeWatcher) Rescan(...uint64) error      { return nil }
func (w *fakeWatcher) Events() <-chan listen.Event { return w.events }
func (w *fakeWatcher) Path() listen.Path           { return w.path }
func (w *fakeWatcher) Close() error                { return nil }

// lastID is the id of the cgroup watched last.
func (w *fakeWatcher) lastID() uint64 { return uint64(len(w.watched)) }

// poke is one Listening call.
type poke struct {
	instanceID string
	port       int
	opened     bool
}

// fakeManager runs no probe: it records the calls, and every instance
// has one probe a listener triggers.
type fakeManager struct {
	started, stopped []string
	pokes            []poke
	results          chan probes.Result
}

func (m *fakeManager) Start(id string, _ *v1.Container, _ probes.Target) {
	m.started = append(m.started, id)
}
func (m *fakeManager) Stop(id string, _ ...vocab.ProbeKind) { m.stopped = append(m.stopped, id) }
func (m *fakeManager) Listening(id string, port int, opened bool) int {
	m.pokes = append(m.pokes, poke{id, port, opened})
	return 1
}
func (m *fakeManager) Results() <-chan probes.Result { return m.results }

// testProber is probing with a fake watcher on path and a fake manager;
// pods' cgroups are kubepods/pod<uid> under a temporary cgroup2 mount,
// mirrored there when hybrid.
func testProber(t *testing.T, path listen.Path, hybrid bool, log *slog.Logger) (*Prober, *fakeWatcher, *fakeManager) {
	t.Helper()
	w := &fakeWatcher{path: path, events: make(chan listen.Event)}
	m := &fakeManager{results: make(chan probes.Result)}
	l := &listenProbes{w: w, path: path, hier: listen.Hierarchy{Mount: t.TempDir(), Hybrid: hybrid},
		pods: map[types.UID]uint64{}, byID: map[uint64]types.UID{}, started: make(chan uint64, 64),
		log: log, cgroupsOn: true,
		podCgroup:  func(p *v1.Pod) string { return "kubepods/pod" + string(p.UID) },
		podCgroups: func(uid types.UID) []string { return []string{"kubepods/pod" + string(uid)} },
		mirrored:   func() bool { return hybrid }}
	n := &netCounters{pods: map[types.UID]*podNet{}, log: log, runtimeOf: func(*v1.Pod) runtime.Runtime { return nil }}
	p := &Prober{manager: m, listen: l, net: n,
		reports: make(chan Report, 1), closed: make(chan struct{})}
	t.Cleanup(p.Close)
	return p, w, m
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// readinessPod has an init container and two containers, each with a
// tcpSocket readiness probe on 8080, or none when probed is false.
func readinessPod(uid string, probed bool) *v1.Pod {
	var probe *v1.Probe
	if probed {
		probe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt(8080)}}}
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: uid, UID: types.UID(uid)}, Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "init", ReadinessProbe: probe}},
		Containers:     []v1.Container{{Name: "app", ReadinessProbe: probe}, {Name: "side", ReadinessProbe: probe}}}}
}

// instanceOf is the loop's view of pod: init and app have an instance,
// side has none yet.
func instanceOf(pod *v1.Pod) *lifecycle.Instance {
	return &lifecycle.Instance{Pod: pod,
		Init:       []*lifecycle.Container{{Name: "init", InstanceID: "i-init"}},
		Containers: []*lifecycle.Container{{Name: "app", InstanceID: "i-app"}, {Name: "side"}}}
}

// A listener in a watched pod pokes the probes of each container's
// current instance, init containers included; a closing says so.
func TestListenedPokesEveryCurrentInstance(t *testing.T) {
	var log bytes.Buffer
	p, w, m := testProber(t, listen.PathEBPF, false, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	pod := readinessPod("u1", true)
	p.Watch(pod)
	pods := func(uid types.UID) *lifecycle.Instance { return instanceOf(pod) }

	p.Listened(listen.Event{Kind: listen.Listening, Cgroup: w.lastID(), Port: 8080}, pods)
	p.Listened(listen.Event{Kind: listen.Closed, Cgroup: w.lastID(), Port: 8080}, pods)
	want := []poke{{"i-init", 8080, true}, {"i-app", 8080, true}, {"i-init", 8080, false}, {"i-app", 8080, false}}
	if !slices.Equal(m.pokes, want) {
		t.Errorf("pokes %v, want %v", m.pokes, want)
	}
	if !strings.Contains(log.String(), `msg="listener triggered probes" pod=default/u1`) {
		t.Errorf("no debug line for the triggered probes:\n%s", log.String())
	}
}

// Nothing is poked for a cgroup no longer watched or a pod the loop no
// longer has.
func TestListenedIgnoresWhatIsGone(t *testing.T) {
	p, w, m := testProber(t, listen.PathEBPF, false, discard())
	pod := readinessPod("u1", true)
	p.Watch(pod)
	id := w.lastID()
	p.Listened(listen.Event{Kind: listen.Listening, Cgroup: id, Port: 8080}, func(types.UID) *lifecycle.Instance { return nil })
	p.Unwatch(pod.UID)
	p.Listened(listen.Event{Kind: listen.Listening, Cgroup: id, Port: 8080}, func(types.UID) *lifecycle.Instance { return instanceOf(pod) })
	if len(m.pokes) != 0 {
		t.Errorf("pokes %v, want none", m.pokes)
	}
	if !slices.Equal(w.unwatched, []uint64{id}) {
		t.Errorf("unwatched %v, want [%d]", w.unwatched, id)
	}
}

// A pod's cgroup is watched once, and only when a listener can trigger
// one of its probes; starting probes watches an adopted pod too.
func TestWatchOncePerListenProbedPod(t *testing.T) {
	p, w, m := testProber(t, listen.PathEBPF, false, discard())
	p.Watch(readinessPod("plain", false))
	pod := readinessPod("u1", true)
	p.Watch(pod)
	p.Watch(pod)
	p.Start(pod, "i-app", &pod.Spec.Containers[0], probes.Target{})
	adopted := readinessPod("u2", true)
	p.Start(adopted, "i-adopted", &adopted.Spec.Containers[0], probes.Target{})
	mount := p.listen.hier.Mount
	want := []string{filepath.Join(mount, "kubepods/podu1"), filepath.Join(mount, "kubepods/podu2")}
	if !slices.Equal(w.watched, want) {
		t.Errorf("watched %v, want %v", w.watched, want)
	}
	if !slices.Equal(m.started, []string{"i-app", "i-adopted"}) {
		t.Errorf("probes started for %v", m.started)
	}
	p.Stop("i-app")
	if !slices.Equal(m.stopped, []string{"i-app"}) {
		t.Errorf("probes stopped for %v", m.stopped)
	}
}

// On a hybrid host the pod's cgroup2 mirror is made when it is watched
// and removed when it is gone.
func TestHybridMirrorMadeAndRemoved(t *testing.T) {
	p, _, _ := testProber(t, listen.PathEBPF, true, discard())
	pod := readinessPod("u1", true)
	dir := filepath.Join(p.listen.hier.Mount, "kubepods/podu1")
	p.Watch(pod)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("mirror %s not made: %v", dir, err)
	}
	p.Unwatch(pod.UID)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("mirror %s still there: %v", dir, err)
	}
}

// On the sock_diag path a watched pod, and each container start of it,
// has its listeners dumped soon; the eBPF path needs no dump.
func TestSockDiagDumpsAfterStarts(t *testing.T) {
	for _, tc := range []struct {
		path  listen.Path
		kicks int
	}{{listen.PathSockDiag, 2}, {listen.PathEBPF, 0}} {
		p, _, _ := testProber(t, tc.path, false, discard())
		pod := readinessPod("u1", true)
		p.ContainerStarted(pod.UID) // not watched yet: nothing to dump
		p.Watch(pod)
		p.ContainerStarted(pod.UID)
		if n := len(p.listen.started); n != tc.kicks {
			t.Errorf("%s: %d dumps asked, want %d", tc.path, n, tc.kicks)
		}
	}
}

// The probes' results reach the loop on the one channel.
func TestReportsCarryResults(t *testing.T) {
	p, _, m := testProber(t, listen.PathEBPF, false, discard())
	go p.forward(m.results)
	r := probes.Result{InstanceID: "i-app", Kind: vocab.Readiness, OK: true, Listen: true}
	m.results <- r
	if got := <-p.Reports(); got.Listener != nil || got.Result != r {
		t.Errorf("report %+v, want the result %+v", got, r)
	}
}

// Without cgroups, or with probes.listen off, probes stay periodic: the
// node says so, and nothing is watched or counted.
func TestPeriodicWithoutWatcher(t *testing.T) {
	noCgroups := podcgroups.New(podcgroups.Options{Log: discard()})
	for _, o := range []Options{{Listen: "off", Cgroups: noCgroups}, {Cgroups: noCgroups}} {
		o.Log = discard()
		o.RuntimeOf = func(*v1.Pod) runtime.Runtime { return nil }
		p := Open(t.Context(), o)
		pod := readinessPod("u1", true)
		p.Watch(pod)
		if got := p.NodeAnnotations()[ListenPathAnnotation]; got != string(listen.PathPeriodic) {
			t.Errorf("listen %q: path %q, want periodic", o.Listen, got)
		}
		if s := p.NetStats(pod); s != nil {
			t.Errorf("listen %q: net stats %+v, want none", o.Listen, s)
		}
		p.Unwatch(pod.UID)
		p.Close()
	}
	var none *Prober
	if got := none.NodeAnnotations()[ListenPathAnnotation]; got != string(listen.PathPeriodic) {
		t.Errorf("no probing: path %q, want periodic", got)
	}
}
