package supervisor

import (
	"errors"
	"time"
)

// inbox is how work from other goroutines (the local API, the hub) reaches
// the loop, the one goroutine that owns the machine: requests wait for the
// loop to take them, fail at once once it has stopped for good, and the
// daemon's start-up is announced once it is over.
type inbox struct {
	requests chan request
	// stopped closes when Run ends: requests fail at once from then on.
	stopped chan struct{}
	// supervising closes when Run has restored the pods, read the
	// manifests and starts supervising them.
	supervising chan struct{}
	// objects holds a wake-up when ConfigMaps or Secrets changed.
	objects chan struct{}
}

// request is work the API asks the loop to do on the machine.
type request struct {
	fn    func() error
	reply chan error
}

func newInbox() *inbox {
	return &inbox{requests: make(chan request), stopped: make(chan struct{}), supervising: make(chan struct{}), objects: make(chan struct{}, 1)}
}

// do runs fn on the loop goroutine, which owns the machine.
func (b *inbox) do(fn func() error) error {
	r := request{fn: fn, reply: make(chan error, 1)}
	select {
	case b.requests <- r:
		return <-r.reply
	case <-b.stopped:
		return errStopped
	case <-time.After(10 * time.Second):
		return errors.New("the daemon is busy; try again")
	}
}

// serve runs a request the loop took.
func (r request) serve() { r.reply <- r.fn() }

// startSupervising announces that the start-up is over.
func (b *inbox) startSupervising() { close(b.supervising) }

// stop makes every request fail from now on: the loop has ended.
func (b *inbox) stop() { close(b.stopped) }

// objectsChanged wakes the loop to refresh the pods' object volumes; a
// wake-up already pending covers this one.
func (b *inbox) objectsChanged() {
	select {
	case b.objects <- struct{}{}:
	default:
	}
}
