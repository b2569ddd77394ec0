package runtime

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
)

// Plugin is a concrete runtime as it registers itself (RegisterPlugin,
// from its package's init): the daemon makes it by name with the
// settings the command chose, and the CLI runs exec through it. Which
// runtimes a binary carries is decided by the packages its command
// imports.
type Plugin struct {
	// Name is the runtime class of its pods.
	Name string
	// New makes the runtime from its own settings (opaque here: the
	// command builds them, the runtime's package defines them). An
	// *UnavailableError says why its pods cannot run on this device.
	New func(settings any, env Env) (Runtime, error)
	// Exec runs a command in a container as the target says: the CLI's
	// side of exec. It returns the command's exit code.
	Exec func(t ExecTarget, command []string, stdin, tty bool) (int, error)
}

// Env is what the daemon gives every runtime it makes.
type Env struct {
	// DataDir is the daemon's data directory.
	DataDir string
	Cgroups Cgroups
	Log     *slog.Logger
	// Stop closes when the daemon stops: a daemon the runtime launched
	// (a managed containerd) stops with it.
	Stop <-chan struct{}
}

// Choice is a runtime the daemon is to run, by its plugin's name, with the
// settings of that plugin.
type Choice struct {
	Name     string
	Settings any
}

// Closer is a runtime with something to stop when the daemon stops (its
// containers keep running).
type Closer interface {
	Close()
}

// UnavailableError is why a runtime cannot run its pods on this device.
type UnavailableError struct {
	Err error
	// Hint says what to do instead.
	Hint string
}

func (e *UnavailableError) Error() string {
	if e.Hint == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + "; " + e.Hint
}

func (e *UnavailableError) Unwrap() error { return e.Err }

var plugins = struct {
	sync.Mutex
	byName map[string]Plugin
}{byName: map[string]Plugin{}}

// RegisterPlugin makes a runtime available by its name. Registering a
// name twice is a programming error.
func RegisterPlugin(p Plugin) {
	plugins.Lock()
	defer plugins.Unlock()
	if _, dup := plugins.byName[p.Name]; dup {
		panic(fmt.Sprintf("runtime %q registered twice", p.Name))
	}
	plugins.byName[p.Name] = p
}

// PluginNamed returns the registered runtime of that name.
func PluginNamed(name string) (Plugin, bool) {
	plugins.Lock()
	defer plugins.Unlock()
	p, ok := plugins.byName[name]
	return p, ok
}

// PluginNames lists the registered runtimes in order.
func PluginNames() []string {
	plugins.Lock()
	defer plugins.Unlock()
	names := make([]string, 0, len(plugins.byName))
	for n := range plugins.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
