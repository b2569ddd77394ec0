package containerd

import (
	"fmt"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

func init() {
	runtime.RegisterPlugin(runtime.Plugin{Name: Name, New: newPlugin,
		Exec: func(t runtime.ExecTarget, command []string, stdin, tty bool) (int, error) {
			return 1, Exec(t, command, stdin, tty) // it returns only when it could not become the exec
		}})
}

// newPlugin makes the runtime the daemon runs from its Config and launches
// its plugin; a Config that names no containerd leaves its pods
// unavailable.
func newPlugin(settings any, env runtime.Env) (runtime.Runtime, error) {
	cfg, ok := settings.(Config)
	if !ok {
		return nil, fmt.Errorf("the %s runtime's settings are a %T, not containerd.Config", Name, settings)
	}
	if !cfg.Configured() {
		return nil, &runtime.UnavailableError{Err: ErrNotConfigured, Hint: "set runtimeClassName: process to run host processes"}
	}
	r := New(cfg, env.DataDir, env.Cgroups, env.Log)
	if err := r.Launch(env.Stop); err != nil {
		return nil, err
	}
	return r, nil
}

// What the daemon finds containerd's runtime to have.
var (
	_ runtime.Images    = (*Runtime)(nil)
	_ runtime.LogReader = (*Runtime)(nil)
	_ runtime.Closer    = (*Runtime)(nil)
)
