package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/sdnotify"
)

// notifySocket stands for systemd's notify socket: a unixgram socket the
// environment names, with a watchdog period for this process if given.
type notifySocket struct{ conn *net.UnixConn }

func fakeNotifySocket(t *testing.T, watchdog time.Duration) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdnotify") // short: a socket's path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	if watchdog > 0 {
		t.Setenv("WATCHDOG_USEC", strconv.FormatInt(watchdog.Microseconds(), 10))
		t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	}
	return &notifySocket{conn: conn}
}

// next returns the next message, or false after wait.
func (s *notifySocket) next(wait time.Duration) (string, bool) {
	buf := make([]byte, 4096)
	s.conn.SetReadDeadline(time.Now().Add(wait))
	n, err := s.conn.Read(buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// until reads messages until one has the assignment want, and returns
// every message read; it fails the test after wait.
func (s *notifySocket) until(t *testing.T, want string, wait time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(wait)
	for {
		msg, ok := s.next(time.Until(deadline))
		if !ok {
			t.Fatalf("no %s within %s; got %q", want, wait, got)
		}
		got = append(got, msg)
		if has(msg, want) {
			return got
		}
	}
}

// pending returns the messages already sent and not read: what the
// socket holds, read without waiting (a short read deadline could pass
// before the read began on a busy machine and leave a message queued).
func (s *notifySocket) pending() []string {
	s.conn.SetReadDeadline(time.Time{})
	rc, err := s.conn.SyscallConn()
	if err != nil {
		panic(err)
	}
	var got []string
	buf := make([]byte, 4096)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			return true // never wait for more
		}); err != nil || rerr != nil {
			return got
		}
		got = append(got, string(buf[:n]))
	}
}

// has says whether msg carries the assignment a (a whole line).
func has(msg, a string) bool {
	for line := range strings.SplitSeq(msg, "\n") {
		if line == a {
			return true
		}
	}
	return false
}

// runnable is a daemon whose pods run on rt, to Run, with the notify
// socket the environment names.
func runnable(t *testing.T, cfg *config.Config, rt runtime.Runtime) *Daemon {
	t.Helper()
	sock, err := sdnotify.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, Options{Notify: sock}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d.runtimes.Registry = runtime.NewRegistry("fake")
	d.runtimes.Register("fake", rt)
	// No thresholds: nothing is evicted; the safety net sleeps.
	d.protector = shellProtector(t, d, nodeprotect.Options{Node: nodeConfig(cfg, "test"),
		Eviction: nodeprotect.EvictionConfig{MonitorPeriod: time.Hour}})
	return d
}

// start runs d until the returned stop, which cancels its context as
// SIGTERM does and waits for Run to return.
func start(t *testing.T, d *Daemon) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

// writePod writes the manifest of pod web, one container running on the
// fake runtime.
func writePod(t *testing.T, cfg *config.Config) {
	t.Helper()
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: app, image: host}\n"
	if err := os.WriteFile(filepath.Join(cfg.Manifests, "web.yaml"), []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitRunning waits for pod web's container to run, and returns it.
func waitRunning(t *testing.T, d *Daemon) lifecycle.Container {
	t.Helper()
	var app lifecycle.Container
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		d.inbox.do(func() error {
			if in := d.machine.Instances(); len(in) == 1 && in[0].Container("app").Phase == lifecycle.Running {
				app = *in[0].Container("app")
			}
			return nil
		})
		if app.InstanceID != "" {
			return app
		}
	}
	d.inbox.do(func() error {
		for _, in := range d.machine.Instances() {
			t.Logf("%s %+v", in.Key(), in.Container("app"))
		}
		pods, _, _ := d.view.Pods()
		for _, p := range pods {
			t.Logf("%s %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		return nil
	})
	t.Fatal("web's app does not run")
	return app
}

// gatedRuntime holds instances at start, and lists them only once open
// closes.
type gatedRuntime struct {
	*recoveringRuntime
	open chan struct{}
}

func (g *gatedRuntime) Recover() ([]runtime.Found, error) {
	<-g.open
	return g.recoveringRuntime.Recover()
}

// READY waits for the pods found running to be adopted: nothing but the
// first status goes while the runtime has not listed them, and when READY
// goes, the running container is the recorded one, adopted, not a new
// start.
func TestServiceReadyAfterAdoption(t *testing.T) {
	sock := fakeNotifySocket(t, 0)
	cfg := shellConfig(t)
	writePod(t, cfg)
	// A first daemon runs the pod and records it.
	first := newFakeRuntime()
	d := runnable(t, cfg, first)
	stop := start(t, d)
	sock.until(t, "READY=1", 10*time.Second)
	app := waitRunning(t, d)
	stop()
	sock.pending()

	// The next daemon finds it running.
	rt := &gatedRuntime{open: make(chan struct{}), recoveringRuntime: &recoveringRuntime{fakeRuntime: newFakeRuntime(),
		found: []runtime.Found{{InstanceID: app.InstanceID, PodUID: d.machine.Instances()[0].UID(), PodNamespace: "default",
			PodName: "web", Container: "app", Attempt: app.Attempt, Alive: true, StartedAt: time.Now()}}}}
	d2 := runnable(t, cfg, rt)
	start(t, d2)
	if msg, ok := sock.next(10 * time.Second); !ok || msg != "STATUS=recovering: restoring pod records" {
		t.Fatalf("first message %q, want the recovering status", msg)
	}
	// Longer than StatusGap: the progress goes out as soon as it is known.
	if msg, ok := sock.next(sdnotify.StatusGap + 100*time.Millisecond); ok {
		t.Fatalf("sent %q while the runtime had not listed its containers", msg)
	}
	close(rt.open)
	got := sock.until(t, "READY=1", 10*time.Second)
	if got[0] != "STATUS=recovering: adopted 0 of 1 pod" {
		t.Errorf("after the listing: %q, want the adoption's progress first", got)
	}
	if last := got[len(got)-1]; !has(last, "STATUS=running 1 pod") {
		t.Errorf("READY came with %q, want the running status", last)
	}
	if err := d2.inbox.do(func() error {
		c := d2.machine.Instances()[0].Container("app")
		if c.Phase != lifecycle.Running || c.InstanceID != app.InstanceID {
			return errors.New("app is " + string(c.Phase) + " " + c.InstanceID + ", want the recorded " + app.InstanceID + " adopted")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if started, _, _ := rt.snapshot(); len(started) != 0 {
		t.Errorf("the second daemon started %v, want the running instance adopted", started)
	}
}

// reconnectingRuntime is a runtime that talks to a daemon which may be
// away (as containerd): what it holds is listed when it connects.
type reconnectingRuntime struct {
	*recoveringRuntime
	connected chan struct{}
}

func (r *reconnectingRuntime) Connected() <-chan struct{} { return r.connected }
func (r *reconnectingRuntime) Follow(string)              {}
func (r *reconnectingRuntime) Follows(string) bool        { return false }

// With a runtime that reconnects holding restored pods, READY waits for
// it to connect and its containers to be adopted.
func TestServiceReadyWaitsForReconnectingRuntime(t *testing.T) {
	sock := fakeNotifySocket(t, 0)
	cfg := shellConfig(t)
	writePod(t, cfg)
	d := runnable(t, cfg, newFakeRuntime())
	stop := start(t, d)
	sock.until(t, "READY=1", 10*time.Second)
	app := waitRunning(t, d)
	stop()
	sock.pending()

	rt := &reconnectingRuntime{connected: make(chan struct{}), recoveringRuntime: &recoveringRuntime{fakeRuntime: newFakeRuntime(),
		found: []runtime.Found{{InstanceID: app.InstanceID, PodUID: d.machine.Instances()[0].UID(), PodNamespace: "default",
			PodName: "web", Container: "app", Attempt: app.Attempt, Alive: true, StartedAt: time.Now()}}}}
	d2 := runnable(t, cfg, rt)
	start(t, d2)
	got := sock.until(t, "STATUS=recovering: waiting for fake to adopt its pods", 10*time.Second)
	for _, msg := range got {
		if has(msg, "READY=1") {
			t.Fatalf("READY before the runtime connected: %q", got)
		}
	}
	if msg, ok := sock.next(300 * time.Millisecond); ok {
		t.Fatalf("sent %q before the runtime connected", msg)
	}
	rt.connected <- struct{}{}
	got = sock.until(t, "READY=1", 5*time.Second)
	if last := got[len(got)-1]; !has(last, "STATUS=running 1 pod") {
		t.Errorf("READY came with %q, want the running status", last)
	}
	if a := waitRunning(t, d2); a.InstanceID != app.InstanceID {
		t.Errorf("running %s, want the recorded %s adopted", a.InstanceID, app.InstanceID)
	}
}

// WATCHDOG=1 comes from the loop every half watchdog period; a loop held
// inside a step sends none, and pings again once it is free.
func TestServiceWatchdogFromTheLoop(t *testing.T) {
	// Long enough that a busy machine's scheduling is not what is timed.
	const period = time.Second
	sock := fakeNotifySocket(t, period)
	cfg := shellConfig(t)
	writePod(t, cfg)
	d := runnable(t, cfg, newFakeRuntime())
	stop := start(t, d)
	sock.until(t, "READY=1", 10*time.Second)

	var pings []time.Time
	for end := time.Now().Add(5 * period); time.Now().Before(end); {
		if msg, ok := sock.next(time.Until(end)); ok && has(msg, "WATCHDOG=1") {
			pings = append(pings, time.Now())
		}
	}
	// At least one a period (systemd's need; a late ping delays the
	// ones after it), about one every half period.
	if len(pings) < 5 || len(pings) > 11 {
		t.Errorf("%d pings in 5 watchdog periods, want about 10 (one every half period)", len(pings))
	}
	// What systemd needs is no gap over the period; a ping delayed by a
	// busy machine makes the next gap shorter (they keep to the loop's
	// schedule), so only a flood is refused below.
	for i := 1; i < len(pings); i++ {
		if gap := pings[i].Sub(pings[i-1]); gap < period/4 || gap > period {
			t.Errorf("ping %d came %s after the one before, want about %s", i, gap, period/2)
		}
	}

	// A step that does not return: a request the loop serves and that
	// blocks.
	held, release := make(chan struct{}), make(chan struct{})
	go d.inbox.do(func() error { close(held); <-release; return nil })
	<-held
	sock.pending()
	for end := time.Now().Add(3 * period); time.Now().Before(end); {
		if msg, ok := sock.next(time.Until(end)); ok {
			t.Fatalf("the loop is held, yet %q was sent", msg)
		}
	}
	close(release)
	if msg, ok := sock.next(period); !ok || !has(msg, "WATCHDOG=1") {
		t.Fatalf("after the loop was freed: %q, want a ping at once", msg)
	}

	stop()
	got := sock.until(t, "STOPPING=1", time.Second)
	if last := got[len(got)-1]; !has(last, "STATUS=stopping: leaving 1 pod running") {
		t.Errorf("STOPPING came with %q, want the pods left running", last)
	}
}

// signalHook is the fake runtime, calling hook before each signal.
type signalHook struct {
	*fakeRuntime
	hook func()
}

func (s *signalHook) Signal(id string, sig syscall.Signal) error {
	s.hook()
	return s.fakeRuntime.Signal(id, sig)
}

// On SIGTERM STOPPING=1 goes before any pod is stopped, then the status
// counts the pods left.
func TestServiceStoppingBeforePodsStop(t *testing.T) {
	sock := fakeNotifySocket(t, 0)
	cfg := shellConfig(t)
	cfg.StopPodsOnExit = true
	writePod(t, cfg)
	var before []string // sent before the first stop signal
	rt := &signalHook{fakeRuntime: newFakeRuntime()}
	rt.hook = func() {
		if before == nil {
			before = append(sock.pending(), "")
		}
	}
	d := runnable(t, cfg, rt)
	stop := start(t, d)
	sock.until(t, "READY=1", 10*time.Second)
	waitRunning(t, d)
	stop() // no read from the socket meanwhile: the hook reads it
	if before == nil {
		t.Fatal("the pod was not stopped")
	}
	if !has(strings.Join(before, "\n"), "STOPPING=1") || !has(strings.Join(before, "\n"), "STATUS=stopping: 1 pod left") {
		t.Errorf("sent before the pod's stop: %q, want STOPPING=1 and the pods left", before)
	}
}

// Without NOTIFY_SOCKET the daemon has no service manager: nothing is
// decided or sent, even with a watchdog period in the environment.
func TestServiceWithoutSystemd(t *testing.T) {
	sock := fakeNotifySocket(t, 100*time.Millisecond)
	t.Setenv("NOTIFY_SOCKET", "")
	cfg := shellConfig(t)
	writePod(t, cfg)
	d := runnable(t, cfg, newFakeRuntime())
	if d.service.plan != nil {
		t.Fatal("a service manager without NOTIFY_SOCKET")
	}
	stop := start(t, d)
	select {
	case <-d.Supervising():
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not start supervising")
	}
	if msg, ok := sock.next(500 * time.Millisecond); ok {
		t.Fatalf("sent %q without NOTIFY_SOCKET", msg)
	}
	stop()
	if msg, ok := sock.next(100 * time.Millisecond); ok {
		t.Fatalf("sent %q on stopping without NOTIFY_SOCKET", msg)
	}
}

// A restart into another version (Restart, then the context ends) leaves
// the pods running even with StopPodsOnExit, and is a reload to systemd.
func TestServiceRestartLeavesPods(t *testing.T) {
	sock := fakeNotifySocket(t, 0)
	cfg := shellConfig(t)
	cfg.StopPodsOnExit = true
	writePod(t, cfg)
	stopped := false
	rt := &signalHook{fakeRuntime: newFakeRuntime()}
	rt.hook = func() { stopped = true }
	d := runnable(t, cfg, rt)
	stop := start(t, d)
	sock.until(t, "READY=1", 10*time.Second)
	waitRunning(t, d)
	d.Restart()
	stop()
	if stopped {
		t.Fatal("a restart stopped the pod")
	}
	got := strings.Join(sock.pending(), "\n")
	if !has(got, "RELOADING=1") || !strings.Contains(got, "MONOTONIC_USEC=") || has(got, "STOPPING=1") {
		t.Fatalf("sent %q; want RELOADING=1 with MONOTONIC_USEC, no STOPPING", got)
	}
}

// Ready closes at the end of the start-up without systemd too (the
// self-update's commit gate waits for it), after a reconnecting runtime
// adopted its pods.
func TestReadyWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	cfg := shellConfig(t)
	writePod(t, cfg)
	d := runnable(t, cfg, newFakeRuntime())
	stop := start(t, d)
	select {
	case <-d.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready did not close after the start-up")
	}
	app := waitRunning(t, d)
	stop()

	rt := &reconnectingRuntime{connected: make(chan struct{}), recoveringRuntime: &recoveringRuntime{fakeRuntime: newFakeRuntime(),
		found: []runtime.Found{{InstanceID: app.InstanceID, PodUID: d.machine.Instances()[0].UID(), PodNamespace: "default",
			PodName: "web", Container: "app", Attempt: app.Attempt, Alive: true, StartedAt: time.Now()}}}}
	d2 := runnable(t, cfg, rt)
	start(t, d2)
	select {
	case <-d2.Supervising():
	case <-time.After(10 * time.Second):
		t.Fatal("the second daemon did not start supervising")
	}
	select {
	case <-d2.Ready():
		t.Fatal("Ready before the reconnecting runtime adopted its pods")
	default:
	}
	rt.connected <- struct{}{}
	select {
	case <-d2.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready did not close once the runtime adopted its pods")
	}
}

// With a hub attached, the status line says how the hub connection stands
// and which generation runs, sent when either changes (the uplink's
// HubLink, a document applied), with nothing else changing.
func TestServiceStatusWithHub(t *testing.T) {
	sock := fakeNotifySocket(t, 0)
	cfg := shellConfig(t)
	d := runnable(t, cfg, newFakeRuntime())
	hub := d.Assignments()
	hub.ExpectAssigned(0, nil, nil)
	// The uplink tells its first state before the loop runs: HubLink
	// must not wait for the loop.
	told := make(chan struct{})
	go func() { hub.HubLink(false, time.Time{}); close(told) }()
	select {
	case <-told:
	case <-time.After(5 * time.Second):
		t.Fatal("HubLink waited for a loop that does not run yet")
	}
	start(t, d)
	got := sock.until(t, "READY=1", 10*time.Second)
	if last := got[len(got)-1]; !has(last, "STATUS=running 0 pods; hub connecting") {
		t.Errorf("READY came with %q, want the hub connecting", last)
	}
	up := time.Now()
	hub.HubLink(true, up)
	sock.until(t, "STATUS=running 0 pods; hub connected", 5*time.Second)
	hub.ApplyAssigned(7, nil, nil)
	sock.until(t, "STATUS=running 0 pods; hub connected, generation 7", 5*time.Second)
	lost := time.Date(2026, 11, 28, 10, 42, 0, 0, time.Local)
	hub.HubLink(false, lost)
	want := "STATUS=running 0 pods; hub unreachable since " + lost.Format("15:04")
	if y, m, day := time.Now().Date(); y != 2026 || m != time.November || day != 28 {
		want = "STATUS=running 0 pods; hub unreachable since Nov 28 10:42"
	}
	sock.until(t, want+", generation 7", 5*time.Second)
}
