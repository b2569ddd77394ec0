package runtimeset

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/images"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// fakeRuntime records removals and forgotten pods; what a test does not
// use panics (the embedded nil Runtime).
type fakeRuntime struct {
	runtime.Runtime
	exits     chan runtime.Exit
	connected chan struct{}
	removals  chan string
	forgotten []types.UID
	closed    bool
}

func newFake() *fakeRuntime {
	return &fakeRuntime{exits: make(chan runtime.Exit, 4), connected: make(chan struct{}, 1), removals: make(chan string, 4)}
}

func (f *fakeRuntime) Exits() <-chan runtime.Exit { return f.exits }
func (f *fakeRuntime) Remove(id string) error {
	f.removals <- id
	if id == "bad" {
		return errors.New("cannot")
	}
	return nil
}
func (f *fakeRuntime) ForgetPod(uid types.UID) { f.forgotten = append(f.forgotten, uid) }
func (f *fakeRuntime) Close()                  { f.closed = true }

// reconnecting is a fake runtime that talks to a daemon of its own.
type reconnecting struct {
	*fakeRuntime
}

func (r reconnecting) Connected() <-chan struct{} { return r.connected }
func (r reconnecting) Follow(string)              {}
func (r reconnecting) Follows(string) bool        { return false }

// noImages is a runtime.Images that keeps none.
type noImages struct{}

func (noImages) Images() ([]runtime.Image, error) { return nil, nil }
func (noImages) Import(string) ([]string, error)  { return nil, nil }
func (noImages) RemoveImage(string) error         { return nil }
func (noImages) PruneImages(runtime.PruneArgs)    {}
func (noImages) ImageGC() runtime.ImageGC         { return runtime.ImageGC{} }
func (noImages) ImageFS() string                  { return "" }
func (noImages) ImageWaitReasons() []string       { return nil }

// The test plugins register once (a name registers once per process);
// madeNew makes test-made's runtime for the test that runs.
var (
	registerTestPlugins sync.Once
	madeNew             func(settings any, env runtime.Env) (runtime.Runtime, error)
)

func testPlugins() {
	registerTestPlugins.Do(func() {
		runtime.RegisterPlugin(runtime.Plugin{Name: "test-made", New: func(settings any, env runtime.Env) (runtime.Runtime, error) {
			return madeNew(settings, env)
		}})
		runtime.RegisterPlugin(runtime.Plugin{Name: "test-away", New: func(any, runtime.Env) (runtime.Runtime, error) {
			return nil, &runtime.UnavailableError{Err: errors.New("away is not configured"), Hint: "use test-made"}
		}})
		runtime.RegisterPlugin(runtime.Plugin{Name: "test-broken", New: func(any, runtime.Env) (runtime.Runtime, error) {
			return nil, errors.New("broken")
		}})
	})
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func podOf(class string) *v1.Pod {
	p := &v1.Pod{}
	if class != "" {
		p.Spec.RuntimeClassName = &class
	}
	return p
}

// The set makes the runtimes the config chooses from their plugins, with
// their own settings; one that is unavailable leaves its pods an error
// that says why, and why there are no images.
func TestSetupMakesTheChosenRuntimes(t *testing.T) {
	testPlugins()
	made := newFake()
	var gotSettings any
	var gotEnv runtime.Env
	madeNew = func(settings any, env runtime.Env) (runtime.Runtime, error) {
		gotSettings, gotEnv = settings, env
		return made, nil
	}
	s := New(quiet())
	stop := make(chan struct{})
	env := runtime.Env{DataDir: "/data", Log: quiet(), Stop: stop}
	s.Choose([]runtime.Choice{{Name: "test-made", Settings: 42}, {Name: "test-away"}}, "test-away")
	closeAll, err := s.Setup(env)
	if err != nil {
		t.Fatal(err)
	}
	if gotSettings != 42 || gotEnv.DataDir != "/data" || gotEnv.Stop == nil {
		t.Fatalf("plugin got settings %v, env %+v", gotSettings, gotEnv)
	}
	if rt := s.Of(podOf("test-made")); rt != made {
		t.Fatalf("runtime of a test-made pod: %v", rt)
	}
	if _, err := s.For(podOf("")); err == nil || err.Error() != "away is not configured; use test-made" {
		t.Fatalf("runtime of a default pod: %v", err)
	}
	if s.Of(podOf("")) != nil {
		t.Fatal("a pod without a runtime has one")
	}
	close(stop)
	if store, why := s.Watch(stop); store != nil || why == nil || why.Error() != "away is not configured" {
		t.Fatalf("images: %v, %v", store, why)
	}
	closeAll()
	if !made.closed {
		t.Fatal("the runtime was not closed")
	}
}

func TestSetupFailsOnUnknownOrBrokenRuntimes(t *testing.T) {
	testPlugins()
	made := newFake()
	madeNew = func(any, runtime.Env) (runtime.Runtime, error) { return made, nil }
	s := New(quiet())
	s.Choose([]runtime.Choice{{Name: "test-none"}}, "")
	_, err := s.Setup(runtime.Env{})
	if err == nil || !strings.Contains(err.Error(), `runtime "test-none" is not built into this podvisor`) {
		t.Fatalf("an unknown runtime: %v", err)
	}
	s = New(quiet())
	s.Choose([]runtime.Choice{{Name: "test-made"}, {Name: "test-broken"}}, "")
	_, err = s.Setup(runtime.Env{})
	if err == nil || err.Error() != "broken" {
		t.Fatalf("a broken runtime: %v", err)
	}
	if !made.closed {
		t.Fatal("the runtime made before the broken one was not closed")
	}
}

// Exits and reconnections reach the loop with their runtime, until stop.
func TestWatchForwardsExitsAndReconnections(t *testing.T) {
	plain, ctr := newFake(), reconnecting{newFake()}
	s := New(quiet())
	s.Registry = runtime.NewRegistry("ctr")
	s.Register("plain", plain)
	s.Register("ctr", ctr)
	stop := make(chan struct{})
	defer close(stop)
	if store, why := s.Watch(stop); store != nil || why == nil || why.Error() != "no runtime on this device keeps images" {
		t.Fatalf("images: %v, %v", store, why)
	}
	plain.exits <- runtime.Exit{InstanceID: "a", ExitCode: 3}
	x := <-s.Exits()
	if x.Runtime != plain || x.Exit.InstanceID != "a" || x.Exit.ExitCode != 3 {
		t.Fatalf("exit %+v", x)
	}
	ctr.connected <- struct{}{}
	if rt := <-s.Reconnected(); rt != ctr {
		t.Fatalf("reconnected %v", rt)
	}
}

// The runtime that keeps images is handed to the image component.
func TestWatchFindsTheRuntimeThatKeepsImages(t *testing.T) {
	keeper := struct {
		reconnecting
		noImages
	}{reconnecting{newFake()}, noImages{}}
	s := New(quiet())
	s.Registry = runtime.NewRegistry("ctr")
	s.Register("ctr", keeper)
	stop := make(chan struct{})
	defer close(stop)
	if got, why := s.Watch(stop); got == nil || why != nil {
		t.Fatalf("images: %v, %v", got, why)
	}
}

// A failed recovery is asked for again a second later, once.
func TestRecoverLater(t *testing.T) {
	s := New(quiet())
	var waits []time.Duration
	var pending []func()
	s.afterFunc = func(d time.Duration, f func()) { waits, pending = append(waits, d), append(pending, f) }
	rt := newFake()
	s.RecoverLater(rt)
	s.RecoverLater(rt)
	select {
	case <-s.RecoverRetry():
		t.Fatal("a retry before its time")
	default:
	}
	for _, f := range pending {
		f()
	}
	if got := <-s.RecoverRetry(); got != rt || !slices.Equal(waits, []time.Duration{time.Second, time.Second}) {
		t.Fatalf("retry of %v after %v", got, waits)
	}
	select {
	case <-s.RecoverRetry():
		t.Fatal("two retries pending")
	default:
	}
}

// Finished instances are removed only when flushed, each from its own
// runtime; a failed removal does not stop the rest.
func TestRemovalsWaitForTheFlush(t *testing.T) {
	a, b := newFake(), newFake()
	s := New(quiet())
	s.RemoveAfterSave(a, "bad")
	s.RemoveAfterSave(a, "a1")
	s.RemoveAfterSave(b, "b1")
	select {
	case id := <-a.removals:
		t.Fatalf("%s removed before the flush", id)
	default:
	}
	s.FlushRemovals()
	var gotA, gotB []string
	for len(gotA)+len(gotB) < 3 {
		select {
		case id := <-a.removals:
			gotA = append(gotA, id)
		case id := <-b.removals:
			gotB = append(gotB, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("removed only %v and %v", gotA, gotB)
		}
	}
	if !slices.Equal(gotA, []string{"bad", "a1"}) || !slices.Equal(gotB, []string{"b1"}) {
		t.Fatalf("removed %v and %v", gotA, gotB)
	}
	s.FlushRemovals() // nothing left: nothing to do
}

func TestForgetPodTellsEveryRuntime(t *testing.T) {
	a, b := newFake(), newFake()
	s := New(quiet())
	s.Registry = runtime.NewRegistry("a")
	s.Register("a", a)
	s.Register("b", b)
	s.ForgetPod("u1")
	if !slices.Equal(a.forgotten, []types.UID{"u1"}) || !slices.Equal(b.forgotten, []types.UID{"u1"}) {
		t.Fatalf("forgotten %v and %v", a.forgotten, b.forgotten)
	}
}

// starting records the containers it is asked to start and reports each
// start with err.
type starting struct {
	*fakeRuntime
	err     error
	started []string
}

func (s *starting) Start(c *runtime.Container, done func(runtime.Started)) {
	s.started = append(s.started, c.InstanceID)
	done(runtime.Started{Err: s.err})
}

// A start's result reaches the loop with the start it answers and the
// runtime that ran it; one no runtime could take is reported at once.
func TestStartsReportOnStarted(t *testing.T) {
	s := New(quiet())
	rt := &starting{fakeRuntime: newFake(), err: errors.New("exec failed")}
	s.Start(rt, &runtime.Container{InstanceID: "i1"}, Start{Pod: "uid", Container: "app", InstanceID: "i1"})
	r := <-s.Started()
	if r.Pod != "uid" || r.Container != "app" || r.InstanceID != "i1" || r.Runtime != rt || r.Err == nil || r.Err.Error() != "exec failed" {
		t.Fatalf("start %+v", r)
	}
	if !slices.Equal(rt.started, []string{"i1"}) {
		t.Fatalf("started %v", rt.started)
	}
	s.CannotStart(Start{Pod: "uid", Container: "app", InstanceID: "i2"}, errors.New("no runtime"))
	r = <-s.Started()
	if r.InstanceID != "i2" || r.Runtime != nil || r.Err == nil || r.Err.Error() != "no runtime" {
		t.Fatalf("refused start %+v", r)
	}
}

// The image component comes with the watch: without a runtime that keeps
// images, its requests say why; the chosen runtimes are what Setup
// makes.
func TestWatchWithImagesAndChosenRuntimes(t *testing.T) {
	testPlugins()
	s := New(quiet())
	s.Choose([]runtime.Choice{{Name: "test-away"}}, "test-away")
	closeAll, err := s.Setup(runtime.Env{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if s.Images() != nil {
		t.Fatal("images before the watch")
	}
	stop := make(chan struct{})
	defer close(stop)
	s.WatchWithImages(stop, images.Options{Dir: t.TempDir(), Log: quiet()})
	if _, _, err := s.Images().List(); err == nil || err.Error() != "away is not configured" {
		t.Fatalf("listing images: %v, want why there are none", err)
	}
}
