package process

import (
	"fmt"
	"path/filepath"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Settings are the process runtime's own settings, as the command gives
// them to the daemon (runtime.Choice).
type Settings struct {
	// ShimCommand runs a container's shim; the instance directory is
	// appended (podvisor-shim, or podvisor shim).
	ShimCommand []string
	// Keeper runs containers under one keeper per data directory instead
	// of one shim each (EnableKeeper).
	Keeper bool
}

func init() {
	runtime.RegisterPlugin(runtime.Plugin{Name: Name, New: newPlugin,
		Exec: func(t runtime.ExecTarget, command []string, stdin, _ bool) (int, error) {
			return Exec(t, command, stdin)
		}})
}

// newPlugin makes the runtime the daemon runs: instance directories under
// <data-dir>/containers.
func newPlugin(settings any, env runtime.Env) (runtime.Runtime, error) {
	s, ok := settings.(Settings)
	if !ok {
		return nil, fmt.Errorf("the %s runtime's settings are a %T, not process.Settings", Name, settings)
	}
	r, err := New(filepath.Join(env.DataDir, "containers"), s.ShimCommand, env.Cgroups, env.Log)
	if err != nil {
		return nil, err
	}
	if s.Keeper {
		if err := r.EnableKeeper(); err != nil {
			return nil, err
		}
	}
	return r, nil
}
