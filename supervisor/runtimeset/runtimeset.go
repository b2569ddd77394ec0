// Package runtimeset is the daemon's set of runtimes: it makes the ones
// the configuration chooses from their plugins, starts containers on them,
// forwards their start results, exits and reconnections to the loop,
// removes finished instances once their end is saved, and holds the image
// component of the runtime that keeps images. The loop, which owns the lifecycle machine, decides what
// to do with what it forwards.
package runtimeset

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/images"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Exit is an exit with the runtime that reported it.
type Exit struct {
	Runtime runtime.Runtime
	Exit    runtime.Exit
}

// Start is a container start the loop asked for, and how it went.
type Start struct {
	Pod        types.UID
	Container  string
	InstanceID string
	// Runtime ran the start (nil: no runtime could take it).
	Runtime runtime.Runtime
	runtime.Started
}

// removal is a finished instance to remove once its end is saved.
type removal struct {
	rt runtime.Runtime
	id string
}

// errNoImages is why image requests fail when no runtime keeps images and
// none that would is unavailable.
var errNoImages = errors.New("no runtime on this device keeps images")

// Set holds the runtimes by the runtime class of their pods (the
// Registry, nil until Setup or given) and what they report.
type Set struct {
	*runtime.Registry
	log *slog.Logger
	// choices and fallback are the configuration's (Choose), made by
	// Setup.
	choices     []runtime.Choice
	fallback    string
	started     chan Start
	exits       chan Exit
	reconnected chan runtime.Runtime
	// recoverRetry asks for a recovery again; afterFunc runs f after d
	// (time.AfterFunc).
	recoverRetry chan runtime.Runtime
	afterFunc    func(d time.Duration, f func())
	// noImages is why no runtime keeps images, if none does.
	noImages error
	// removals are loop-owned.
	removals []removal
	// images is the image component of the runtime that keeps images
	// (nil until WatchWithImages).
	images *images.Images
}

// New returns a set without runtimes yet.
func New(log *slog.Logger) *Set {
	return &Set{log: log, started: make(chan Start, 64), exits: make(chan Exit, 256), reconnected: make(chan runtime.Runtime),
		recoverRetry: make(chan runtime.Runtime, 1),
		afterFunc:    func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// Choose keeps the runtimes the configuration chooses, for Setup; pods
// that name no runtime class run under fallback.
func (s *Set) Choose(choices []runtime.Choice, fallback string) {
	s.choices, s.fallback = choices, fallback
}

// Setup makes the runtimes Choose kept from their plugins. A runtime that says it cannot run on
// this device (runtime.UnavailableError) leaves its class an error for its
// pods. It returns what to do when the daemon stops.
func (s *Set) Setup(env runtime.Env) (closeAll func(), err error) {
	s.Registry = runtime.NewRegistry(s.fallback)
	var closers []runtime.Closer
	closeAll = func() {
		for _, c := range closers {
			c.Close()
		}
	}
	for _, choice := range s.choices {
		plugin, ok := runtime.PluginNamed(choice.Name)
		if !ok {
			closeAll()
			return nil, fmt.Errorf("runtime %q is not built into this podvisor", choice.Name)
		}
		rt, err := plugin.New(choice.Settings, env)
		var unavailable *runtime.UnavailableError
		if errors.As(err, &unavailable) {
			s.Unavailable(choice.Name, unavailable.Error())
			// The first that cannot run here says why images cannot.
			s.noImages = cmp.Or(s.noImages, unavailable.Err)
			continue
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		s.Register(choice.Name, rt)
		if c, ok := rt.(runtime.Closer); ok {
			closers = append(closers, c)
		}
	}
	return closeAll, nil
}

// Watch forwards every runtime's exits and reconnections to the loop until
// stop closes. It returns the runtime that keeps images or, without one,
// why there is none.
func (s *Set) Watch(stop <-chan struct{}) (runtime.Images, error) {
	var store runtime.Images
	for _, rt := range s.All() {
		go func() {
			for {
				select {
				case x := <-rt.Exits():
					s.exits <- Exit{rt, x}
				case <-stop:
					return
				}
			}
		}()
		if rc, ok := rt.(runtime.Reconnecting); ok {
			go func() {
				for {
					select {
					case <-rc.Connected():
						s.reconnected <- rt
					case <-stop:
						return
					}
				}
			}()
		}
		if is, ok := rt.(runtime.Images); ok && store == nil {
			store = is
		}
	}
	if store == nil {
		return nil, cmp.Or(s.noImages, errNoImages)
	}
	return store, nil
}

// WatchWithImages is Watch, and makes the image component of the runtime
// that keeps images (Images): without one, its requests fail with why.
func (s *Set) WatchWithImages(stop <-chan struct{}, o images.Options) {
	store, missing := s.Watch(stop)
	s.images = images.New(store, missing, o)
}

// Images is the image component (nil before WatchWithImages).
func (s *Set) Images() *images.Images { return s.images }

// Start starts c on rt in the background; how it went arrives on Started,
// as st with the runtime's report.
func (s *Set) Start(rt runtime.Runtime, c *runtime.Container, st Start) {
	st.Runtime = rt
	rt.Start(c, func(r runtime.Started) {
		st.Started = r
		s.started <- st
	})
}

// CannotStart reports a start no runtime could take, with why.
func (s *Set) CannotStart(st Start, err error) {
	st.Err = err
	s.started <- st
}

// Started delivers how the starts went.
func (s *Set) Started() <-chan Start { return s.started }

// Exits delivers the runtimes' exits.
func (s *Set) Exits() <-chan Exit { return s.exits }

// Reconnected delivers each runtime that (re)connected: what it holds is
// to be reconciled with the records.
func (s *Set) Reconnected() <-chan runtime.Runtime { return s.reconnected }

// RecoverRetry delivers the runtimes whose recovery is to be tried again
// (RecoverLater).
func (s *Set) RecoverRetry() <-chan runtime.Runtime { return s.recoverRetry }

// RecoverLater asks, in a second, for a recovery that failed to be tried
// again: adoption must not be skipped.
func (s *Set) RecoverLater(rt runtime.Runtime) {
	s.afterFunc(time.Second, func() {
		select {
		case s.recoverRetry <- rt:
		default:
		}
	})
}

// Of is the runtime of a pod, or nil (its pods cannot start).
func (s *Set) Of(pod *v1.Pod) runtime.Runtime {
	rt, _ := s.For(pod)
	return rt
}

// RemoveAfterSave queues a finished instance for removal once its end is
// saved: kept until then, a daemon that dies in between still learns its
// exit code from the runtime. Loop-owned.
func (s *Set) RemoveAfterSave(rt runtime.Runtime, id string) {
	s.removals = append(s.removals, removal{rt, id})
}

// FlushRemovals removes the queued instances, in the background; the loop
// calls it once nothing is left unsaved.
func (s *Set) FlushRemovals() {
	if len(s.removals) == 0 {
		return
	}
	batch := s.removals
	s.removals = nil
	go func() {
		for _, r := range batch {
			if err := r.rt.Remove(r.id); err != nil {
				s.log.Warn("removing a finished container", "instance", r.id, "err", err)
			}
		}
	}()
}

// ForgetPod removes what every runtime keeps of a pod that is gone.
func (s *Set) ForgetPod(uid types.UID) {
	for _, rt := range s.All() {
		rt.ForgetPod(uid)
	}
}
