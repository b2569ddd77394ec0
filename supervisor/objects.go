package supervisor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// objectWaits are the waiting reasons of a container that an object's
// arrival or change may end: its environment could not be made.
var objectWaits = []string{lifecycle.CreateContainerConfigError, lifecycle.ObjectsPending}

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

// HubObjectsOverdue tells the daemon which hub objects stayed pending
// (listed for the device, not received) too long: their getter answers
// them as not listed from now on, and each pod using them says so in an
// event before the kubelet's errors follow. Any goroutine; never blocks.
// The uplink tells them as changed too, after this.
func (d *Daemon) HubObjectsOverdue(refs []objects.Ref) {
	if len(refs) == 0 {
		return
	}
	d.objects.NoteOverdue(refs)
	d.inbox.objectsChanged()
}

// ObjectsNotReceived is the reason of the event a hub pod gets when
// objects it references, listed for the device, did not arrive in time
// (the hub or the link is down): it goes on as if they were not listed.
const ObjectsNotReceived = "ObjectsNotReceived"

// objectsOverdue records ObjectsNotReceived on each hub pod using one of
// refs.
func (d *Daemon) objectsOverdue(refs []objects.Ref) {
	d.log.Warn("hub objects not received in time; their pods go on without them", "count", len(refs))
	for _, in := range d.machine.Instances() {
		if in.Pod.Annotations[manifest.AnnotationSource] != manifest.SourceHub {
			continue
		}
		var names []string
		for _, u := range objects.Refs(in.Pod) {
			if slices.Contains(refs, u.Ref) {
				names = append(names, fmt.Sprintf("%s %q", strings.ToLower(string(u.Kind)), u.Name))
			}
		}
		if len(names) > 0 {
			d.record(in, "Warning", ObjectsNotReceived, "objects not yet received from the hub: "+strings.Join(names, ", ")+
				"; going on without waiting for them (as not found, or with the version held before)")
		}
	}
}

// takeObjectChanges is the loop's side of the wake-ups above and of
// ObjectsChanged.
func (d *Daemon) takeObjectChanges() {
	if overdue := d.objects.TakeOverdue(); len(overdue) > 0 {
		d.objectsOverdue(overdue)
	}
	refs, all := d.objects.TakeChanged()
	switch {
	case all:
		d.refreshObjects(nil)
	case len(refs) > 0:
		d.objectsChanged(refs)
	}
}
