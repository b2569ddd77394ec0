package supervisor

import (
	"errors"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podobjects"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// podEnv is what a pod's containers, volumes and downward API see of the
// device: the one place the daemon chooses it per pod (the objects a pod
// may see go in its Objects).
func (d *Daemon) podEnv(pod *v1.Pod) runtime.PodEnv {
	env := d.protector.PodEnv()
	env.Objects = d.objects.For(pod)
	return env
}

// ObjectsChanged tells the daemon that ConfigMaps or Secrets its pods may
// use changed; any goroutine may call it, as often as it likes (calls
// coalesce). The loop then rewrites the object volumes of its pods (the
// kubelet's atomic swap) and tries the containers waiting for their
// volumes (FailedMount) again at once rather than at the end of their
// backoff.
func (d *Daemon) ObjectsChanged() {
	d.objects.Note(nil)
	d.inbox.objectsChanged()
}

// refreshObjects is ObjectsChanged's work on the loop, for the pods that
// use one of changed (nil: every pod). A volume that can no longer be
// written keeps its files and gets the kubelet's FailedMount warning on
// its pod, as a failed remount does. The containers waiting for their
// volumes or their environment's objects are tried again at once.
func (d *Daemon) refreshObjects(changed []objects.Ref) {
	for _, in := range d.machine.Instances() {
		if !hasObjectVolumes(in.Pod) || (changed != nil && !podobjects.Uses(in.Pod, changed)) {
			continue
		}
		_, err := d.podFS.RefreshObjectVolumes(in.Pod, d.podEnv(in.Pod))
		for _, e := range unjoin(err) {
			if me := (*runtime.MountError)(nil); errors.As(e, &me) {
				d.record(in, "Warning", lifecycle.FailedMount, me.Error())
			} else {
				d.log.Warn("updating a pod's volumes", "pod", in.Key(), "err", e)
			}
		}
	}
	now := d.now()
	d.machine.RetryWaiting(now, now, append([]string{lifecycle.FailedMount}, objectWaits...)...)
}

// hasObjectVolumes reports whether a pod has volumes made from objects.
func hasObjectVolumes(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil || v.Secret != nil || v.Projected != nil {
			return true
		}
	}
	return false
}

// unjoin is the errors errors.Join joined, or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
