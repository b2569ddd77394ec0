package containerd

import (
	"time"

	"github.com/podvisor/podvisor/pod/vocab"
)

// A finished container's removal waits for the starts of its pod's
// containers in flight. Deleting its task (runc delete, the bundle, the
// snapshot, writes to containerd's database) while the restart it made
// way for was being created competed with that restart for the CPU,
// containerd and the shim; the kubelet, too, removes dead containers in
// its garbage collection, not as it restarts one.

// removeWait bounds how long a removal waits: a start may pull an image.
const removeWait = 5 * time.Second

// runStarted records a start in flight until the returned func is called.
func (r *Runtime) runStarted(instanceID string) (done func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.starting[instanceID] = ch
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.starting, instanceID)
		r.mu.Unlock()
		close(ch)
	}
}

// awaitPodStarts waits, at most removeWait, for the starts in flight of
// the other instances of instanceID's pod.
func (r *Runtime) awaitPodStarts(instanceID string) {
	starts := r.podStarts(instanceID)
	if len(starts) == 0 {
		return
	}
	timeout := time.NewTimer(removeWait)
	defer timeout.Stop()
	for _, ch := range starts {
		select {
		case <-ch:
		case <-timeout.C:
			return
		}
	}
}

// podStarts are the starts in flight of the other instances of
// instanceID's pod.
func (r *Runtime) podStarts(instanceID string) []chan struct{} {
	uid, _, _, ok := vocab.ParseInstanceID(instanceID)
	if !ok {
		return nil
	}
	var starts []chan struct{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, ch := range r.starting {
		if u, _, _, _ := vocab.ParseInstanceID(id); u == uid && id != instanceID {
			starts = append(starts, ch)
		}
	}
	return starts
}
