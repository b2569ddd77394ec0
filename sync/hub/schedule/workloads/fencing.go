package workloads

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/vocab"
)

// AnnotationLeaseSeconds opts a pod into a self-fencing lease
// (vocab.AnnotationLeaseSeconds): the hub replaces it after the lease's
// silence on its own clock plus the pod's termination grace and
// ClockMarginPercent.
const AnnotationLeaseSeconds = vocab.AnnotationLeaseSeconds

// defaultGracePeriod is a pod's terminationGracePeriodSeconds when it
// names none.
const defaultGracePeriod = 30 * time.Second

// ClockMarginPercent is how much faster than the device's clock the hub's
// may run over a lease: the hub waits that much longer than the device
// does, so a device whose clock runs up to 2% slow (or a hub whose runs
// 2% fast) has stopped its pods when the hub replaces them. Crystal
// oscillators stray by tens of parts per million; 2% covers a device
// whose clock is badly broken without its operator noticing.
const ClockMarginPercent = 2

// LeaseSeconds is the pod's self-fencing lease, 0 when it has none or its
// annotation is not a whole number of seconds in 1..MaxLeaseSeconds
// (apply refuses those; a pod the hub cannot read has no lease, which
// only makes the hub wait longer).
func LeaseSeconds(p *v1.Pod) int64 {
	n, err := vocab.ParseLeaseSeconds(p.Annotations)
	if err != nil {
		return 0
	}
	return n
}

// GracePeriod is the pod's termination grace period: how long its device
// may take to stop it.
func GracePeriod(p *v1.Pod) time.Duration {
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		return time.Duration(*g) * time.Second
	}
	return defaultGracePeriod
}

// LeaseExpiry is when, on the hub's clock, a pod with a self-fencing lease
// on a device unreachable since then has certainly stopped: the lease
// and the grace period, plus ClockMarginPercent of both. ok is false for
// a pod without a lease or a device that is heard from.
//
// Only durations are compared: unreachableSince is the hub's own time
// (the later of when it last heard from the device and when it started),
// and the device counts its lease on its own monotonic clock from a
// moment no later than that one (see docs/scheduling.md).
func LeaseExpiry(p *v1.Pod, unreachableSince time.Time) (time.Time, bool) {
	lease := LeaseSeconds(p)
	if lease == 0 || unreachableSince.IsZero() {
		return time.Time{}, false
	}
	wait := time.Duration(lease)*time.Second + GracePeriod(p)
	wait += (wait*ClockMarginPercent + 99) / 100
	return unreachableSince.Add(wait), true
}

// forceDeleteUnreachable forgets the pods the hub knows cannot run
// although their device cannot say so:
//   - every pod of a fenced device the hub does not hear from, as the pod
//     garbage collector force-deletes the pods of an out-of-service node
//     that is not ready (a fenced device still heard from stops its pods
//     itself: the out-of-service taint evicts them gracefully);
//   - the terminating pods with a self-fencing lease whose device has
//     been unreachable past LeaseExpiry.
//
// Only then may a StatefulSet make another pod of the same identity.
func (k *controllers) forceDeleteUnreachable() {
	lost := map[string]Node{}
	for _, n := range k.c.Nodes() {
		if !n.UnreachableSince.IsZero() {
			lost[n.Name] = n
		}
	}
	if len(lost) == 0 {
		return
	}
	for _, p := range k.c.Pods() {
		n, ok := lost[p.Node]
		if !ok || p.Node == "" {
			continue
		}
		if n.Fenced {
			k.c.ForceDelete(p.Key, ReasonPodGC, fmt.Sprintf("PodGC: device %s is fenced and unreachable", n.Name))
			continue
		}
		if !p.Terminating {
			continue
		}
		at, ok := LeaseExpiry(p.Pod, n.UnreachableSince)
		switch {
		case !ok:
		case k.now.Before(at):
			k.wake(at) // forgotten on time, by the pass then
		default:
			k.c.ForceDelete(p.Key, ReasonPodGC, fmt.Sprintf("PodGC: device %s has been unreachable past the pod's %ss self-fencing lease and its grace period",
				n.Name, p.Pod.Annotations[AnnotationLeaseSeconds]))
		}
	}
}
