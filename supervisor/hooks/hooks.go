// Package hooks runs containers' lifecycle hooks (postStart, preStop) with
// the probes package's handlers, ends those still running when their
// container instance exits, and hands each outcome to the daemon's loop,
// which applies it to the lifecycle machine. It also resolves what probes
// and hooks act on in a container (Target).
package hooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// Options are what a Runner reads of the daemon when a hook starts.
type Options struct {
	// Node is what the downward API tells a pod's containers, and the
	// objects it may see, read at each hook: the daemon learns the
	// allocatable resources after New.
	Node func(*v1.Pod) runtime.PodEnv
	// RuntimeOf is the runtime that runs a pod (nil: none).
	RuntimeOf func(*v1.Pod) runtime.Runtime
}

// Result is how a hook ended.
type Result struct {
	Pod        types.UID
	Container  string
	InstanceID string
	Hook       lifecycle.HookKind
	Err        error
	Warning    string // the LifecycleHTTPFallback event's text, if any
}

// Runner runs the hooks of one daemon. Run and End are called from the
// daemon's loop only; the hooks themselves run in their own goroutines.
type Runner struct {
	opts    Options
	results chan Result
	// cancels ends the hooks still running for a container instance
	// once it exits (a postStart exec hook has no timeout).
	cancels map[string][]context.CancelFunc
}

// New returns a runner with no hook running.
func New(o Options) *Runner {
	return &Runner{opts: o, results: make(chan Result, 64), cancels: map[string][]context.CancelFunc{}}
}

// Results delivers each hook's outcome, once.
func (r *Runner) Results() <-chan Result { return r.results }

// Run starts the hook a RunHook action names. A target that cannot be
// resolved is reported at once, as the hook's failure.
func (r *Runner) Run(in *lifecycle.Instance, a lifecycle.Action) {
	spec := in.Spec(a.Container)
	h := spec.Lifecycle.PostStart
	if a.Hook == lifecycle.PreStop {
		h = spec.Lifecycle.PreStop
	}
	t, err := r.Target(in, a.Container)
	res := Result{Pod: a.Pod, Container: a.Container, InstanceID: a.InstanceID, Hook: a.Hook}
	if err != nil {
		res.Err = err
		r.results <- res
		return
	}
	timeout := hookTimeout(a.Timeout)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancels[a.InstanceID] = append(r.cancels[a.InstanceID], cancel)
	go func() {
		res.Warning, res.Err = probes.Hook(ctx, t, h, timeout)
		r.results <- res
	}()
}

// hookTimeout is an action's hook timeout as a duration: a zero timeout
// is none (the kubelet sets none on exec hooks), and the hook then ends
// with its container instance.
func hookTimeout(t time.Duration) time.Duration {
	if t <= 0 {
		return noHookTimeout
	}
	return t
}

// noHookTimeout stands for "no timeout" where a duration is needed.
const noHookTimeout = 100 * 365 * 24 * time.Hour

// End cancels the hooks still running for a container instance that is
// gone; each still reports its end.
func (r *Runner) End(instanceID string) {
	for _, cancel := range r.cancels[instanceID] {
		cancel()
	}
	delete(r.cancels, instanceID)
}

// Target is what probes and hooks need to act on a container: commands
// run inside it and connections are made from inside its pod's network
// where its runtime gives it its own.
func (r *Runner) Target(in *lifecycle.Instance, container string) (probes.Target, error) {
	spec := in.Spec(container)
	rt := r.opts.RuntimeOf(in.Pod)
	var id string
	if c := in.Container(container); c != nil {
		id = c.InstanceID
	}
	// The instance's own process where its runtime keeps it, else as it
	// would start now.
	var p runtime.Process
	err := errors.ErrUnsupported
	if sp, ok := rt.(runtime.StartedProcesses); ok && id != "" {
		p, err = sp.StartedProcess(id)
	}
	if err != nil {
		if p, err = runtime.Resolve(in.Pod, spec, r.opts.Node(in.Pod)); err != nil {
			return probes.Target{}, err
		}
	}
	t := probes.Target{Host: "127.0.0.1", Ports: spec.Ports, Env: p.Env, Dir: p.Dir, UID: p.UID, GID: p.GID}
	if mn, ok := rt.(runtime.MountNamespaces); ok && len(spec.VolumeMounts) > 0 {
		// Opened at each command: held open, it would keep the
		// namespace after the container ended.
		t.MountNS = func() (*os.File, error) { return mn.MountNS(id) }
	}
	if ic, ok := rt.(runtime.InContainer); ok {
		if netns := ic.NetNS(in.Pod); netns != "" {
			t.DialIn = func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
				return sandbox.DialContext(ctx, d, netns, network, addr)
			}
		}
		t.ExecIn = func(_ context.Context, command []string, timeout time.Duration) (int, string, error) {
			code, out, err := ic.Exec(id, command, timeout)
			if err != nil && !errors.Is(err, runtime.ErrExecTimedOut) {
				// Not run at all: a probe's result is unknown (a hook
				// still fails on it).
				err = fmt.Errorf("%w: %w", probes.ErrUnknown, err)
			}
			return code, out, err
		}
	}
	return t, nil
}
