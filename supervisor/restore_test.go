package supervisor

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/podprobes"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// recoveringRuntime holds, at a daemon's start, the instances it is told
// to, and records the kills asked of it.
type recoveringRuntime struct {
	*fakeRuntime
	found []runtime.Found

	mu     sync.Mutex
	killed []string
}

func (r *recoveringRuntime) Recover() ([]runtime.Found, error) { return r.found, nil }

func (r *recoveringRuntime) Kill(id string) error {
	r.mu.Lock()
	r.killed = append(r.killed, id)
	r.mu.Unlock()
	return nil
}

// A restarted daemon carries out what recoverInstance decides for each
// instance its runtime holds: it adopts the recorded one that runs, kills
// a superseded one, reports the recorded exit of one that ended while it
// was away, and removes a finished one no record knows. It starts nothing.
func TestShellRestoreExecutesRecoveryDecisions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := newFakeRuntime()
	d := shellDaemon(t, ctx, first)
	st := desireWebPod(t, d, `  - {name: app, image: host}
  - {name: side, image: host}`)
	uid := st.Pods[0].UID
	phaseOf := func(d *Daemon, name string) lifecycle.ContainerPhase {
		if in := d.machine.Instance(uid); in != nil && in.Container(name) != nil {
			return in.Container(name).Phase
		}
		return ""
	}
	runUntil(t, d, "both containers run", func() bool {
		return phaseOf(d, "app") == lifecycle.Running && phaseOf(d, "side") == lifecycle.Running
	})
	superseded := d.machine.Instance(uid).Container("app").InstanceID
	first.end(superseded, 1, 0)
	runUntil(t, d, "app runs again", func() bool {
		c := d.machine.Instance(uid).Container("app")
		return c.Phase == lifecycle.Running && c.InstanceID != superseded
	})
	app := *d.machine.Instance(uid).Container("app")
	side := *d.machine.Instance(uid).Container("side")
	d.apply(d.machine.Flush())
	d.state.Close()

	// The next daemon, on the same data directory.
	ghost := lifecycle.InstanceID(uid, "ghost", 0)
	now := time.Now()
	rt := &recoveringRuntime{fakeRuntime: newFakeRuntime(), found: []runtime.Found{
		{InstanceID: app.InstanceID, PodUID: uid, PodNamespace: "default", PodName: "web", Container: "app", Attempt: app.Attempt, Alive: true, StartedAt: now},
		{InstanceID: superseded, PodUID: uid, PodNamespace: "default", PodName: "web", Container: "app", Attempt: app.Attempt - 1, Alive: true, StartedAt: now},
		{InstanceID: side.InstanceID, PodUID: uid, PodNamespace: "default", PodName: "web", Container: "side", Attempt: side.Attempt,
			Exit: &runtime.Exit{InstanceID: side.InstanceID, ExitCode: 7, Reason: "Error", StartedAt: now, FinishedAt: now}},
		{InstanceID: ghost, PodUID: uid, PodNamespace: "default", PodName: "web", Container: "ghost", Attempt: 0},
	}}
	d2, err := New(d.cfg, Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.OpenState(); err != nil {
		t.Fatal(err)
	}
	defer d2.state.Close()
	d2.runtimes.Registry = runtime.NewRegistry("fake")
	d2.runtimes.Register("fake", rt)
	d2.probing = podprobes.Open(ctx, podprobes.Options{Cgroups: d2.cgroups, RuntimeOf: d2.runtimes.Of, Log: d2.log})
	defer d2.probing.Close()
	d2.protector = shellProtector(t, d2, nodeprotect.Options{})
	if err := d2.restore(); err != nil {
		t.Fatal(err)
	}

	if c := d2.machine.Instance(uid).Container("app"); c.Phase != lifecycle.Running || c.InstanceID != app.InstanceID {
		t.Errorf("app: %s %s, want the recorded %s adopted and running", c.Phase, c.InstanceID, app.InstanceID)
	}
	if c := d2.machine.Instance(uid).Container("side"); c.Phase != lifecycle.Exited || c.Current == nil || c.Current.ExitCode != 7 {
		t.Errorf("side: %s %+v, want its recorded exit 7", c.Phase, c.Current)
	}
	rt.mu.Lock()
	killed := slices.Clone(rt.killed)
	rt.mu.Unlock()
	if !slices.Equal(killed, []string{superseded}) {
		t.Errorf("killed %v, want only the superseded %s", killed, superseded)
	}
	if started, removed, _ := rt.snapshot(); len(started) != 0 || !slices.Equal(removed, []string{ghost}) {
		t.Errorf("started %v, removed %v; want nothing started and the finished %s removed", started, removed, ghost)
	}
}
