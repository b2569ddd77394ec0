package supervisor

import (
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// objectWaits are the waiting reasons of a container that an object's
// arrival or change may end: its environment could not be made.
var objectWaits = []string{lifecycle.CreateContainerConfigError}

// objectsChanged acts on the objects of a source that changed: the
// object volumes of the pods using them are rewritten, and the
// containers waiting for their configuration are tried again now, as the
// kubelet retries at its next sync, rather than at the end of their
// backoff. Environments never change under a running container.
func (d *Daemon) objectsChanged(changed []objects.Ref) {
	if len(changed) == 0 {
		return
	}
	d.log.Info("objects changed", "count", len(changed))
	d.refreshObjects(changed)
}

// SetHubObjects gives hub pods the hub's objects for this device (nil:
// they find none), and has their pods refreshed and retried. The uplink
// calls it, from any goroutine, before Run too; it never blocks.
func (d *Daemon) SetHubObjects(g objects.Getter) {
	d.objects.SetHub(g)
	d.inbox.objectsChanged()
}

// HubObjectsChanged tells the daemon which of the hub's objects changed
// (arrived, updated, removed), so that the pods using them are refreshed
// and tried again. The uplink calls it, from any goroutine; it never
// blocks (changes gather until the loop takes them).
func (d *Daemon) HubObjectsChanged(changed []objects.Ref) {
	if len(changed) == 0 {
		return
	}
	d.objects.Note(changed)
	d.inbox.objectsChanged()
}

// takeObjectChanges is the loop's side of the wake-ups above and of
// ObjectsChanged.
func (d *Daemon) takeObjectChanges() {
	refs, all := d.objects.TakeChanged()
	switch {
	case all:
		d.refreshObjects(nil)
	case len(refs) > 0:
		d.objectsChanged(refs)
	}
}
