package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// closingRuntime is a fake runtime with something to stop.
type closingRuntime struct {
	*fakeRuntime
	closed bool
}

func (c *closingRuntime) Close() { c.closed = true }

// The test plugins register once (a name registers once per process);
// testPluginNew makes test-made's runtime for the test that runs.
var (
	registerTestPlugins sync.Once
	testPluginNew       func(settings any, env runtime.Env) (runtime.Runtime, error)
)

// The daemon makes the runtimes the config chooses from their plugins,
// with their own settings; one that is unavailable leaves its pods an
// error that says why, and a name no plugin registered is an error.
func TestRuntimesComeFromTheChosenPlugins(t *testing.T) {
	made := &closingRuntime{fakeRuntime: newFakeRuntime()}
	var gotSettings any
	var gotEnv runtime.Env
	registerTestPlugins.Do(func() {
		runtime.RegisterPlugin(runtime.Plugin{Name: "test-made", New: func(settings any, env runtime.Env) (runtime.Runtime, error) {
			return testPluginNew(settings, env)
		}})
		runtime.RegisterPlugin(runtime.Plugin{Name: "test-away", New: func(any, runtime.Env) (runtime.Runtime, error) {
			return nil, &runtime.UnavailableError{Err: errors.New("away is not configured"), Hint: "use test-made"}
		}})
	})
	testPluginNew = func(settings any, env runtime.Env) (runtime.Runtime, error) {
		gotSettings, gotEnv = settings, env
		return made, nil
	}
	root := t.TempDir()
	cfg := Config{DataDir: filepath.Join(root, "data"), Lifecycle: lifecycle.DefaultConfig(), DefaultRuntime: "test-away",
		Runtimes: []runtime.Choice{{Name: "test-made", Settings: 42}, {Name: "test-away"}}}
	d := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	forwarding := make(chan struct{})
	defer close(forwarding)
	closeAll, err := d.setupRuntimes(ctx.Done(), forwarding)
	if err != nil {
		t.Fatal(err)
	}
	if gotSettings != 42 || gotEnv.DataDir != cfg.DataDir || gotEnv.Log == nil || gotEnv.Stop == nil {
		t.Fatalf("plugin got settings %v, env %+v", gotSettings, gotEnv)
	}
	class := "test-made"
	pod := &v1.Pod{}
	pod.Spec.RuntimeClassName = &class
	if rt, err := d.runtimes.For(pod); err != nil || rt != made {
		t.Fatalf("runtime of a test-made pod: %v, %v", rt, err)
	}
	if _, err := d.runtimes.For(&v1.Pod{}); err == nil || err.Error() != "away is not configured; use test-made" {
		t.Fatalf("runtime of a default pod: %v", err)
	}
	if _, _, err := d.images.List(); err == nil || err.Error() != "away is not configured" {
		t.Fatalf("images without a runtime that keeps them: %v", err)
	}
	closeAll()
	if !made.closed {
		t.Fatal("the runtime was not closed")
	}

	d2 := New(Config{DataDir: cfg.DataDir, Runtimes: []runtime.Choice{{Name: "test-none"}}}, d.log)
	if _, err := d2.setupRuntimes(ctx.Done(), forwarding); err == nil || !strings.Contains(err.Error(), `runtime "test-none" is not built into this podvisor`) {
		t.Fatalf("an unknown runtime: %v", err)
	}
}
