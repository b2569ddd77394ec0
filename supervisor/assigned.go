package supervisor

import (
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
)

// Assignments is the daemon's narrow side for a source of pods outside the
// device: the hub's uplink (sync/uplink), which cmd/podvisor attaches
// to it. Desired pods come in and verdicts on them go back; the daemon's
// status stream (every pod's status, pod events, the node) goes out.
// *Daemon implements it; the daemon knows nothing of the hub's wire or
// storage.
type Assignments interface {
	// ExpectAssigned says a hub is attached, with the hub pods it accepted
	// before (stored on the device): they run from the first
	// reconciliation, even with the hub out of reach. Call before Run.
	ExpectAssigned(generation int64, stored []*v1.Pod)
	// Conflicts are the verdicts on hub pods that cannot run here (a
	// file pod of the same name, the device's policy, a priority class
	// the device lacks), by namespace/name, with the reason. An error
	// means the daemon could not answer now.
	Conflicts(pods []*v1.Pod) (map[string]string, error)
	// ApplyAssigned makes the hub pods exactly these; it is idempotent.
	ApplyAssigned(generation int64, pods []*v1.Pod)
	// Pods is the status stream: every pod's newest status, the view's
	// version (0 until the first reconciliation is published), and a
	// channel closed at the next change.
	Pods() ([]*v1.Pod, uint64, <-chan struct{})
	// PodEvents are the pod events recorded since ExpectAssigned; they wait
	// in a bounded queue that drops the newest when full.
	PodEvents() <-chan PodEvent
	// Node is the device's node status.
	Node() (*v1.Node, error)
}

var _ Assignments = (*Daemon)(nil)

// PodEvent is an event about a pod, as describe shows it.
type PodEvent struct {
	Pod                   string // namespace/name
	Time                  time.Time
	Type, Reason, Message string
}

// podEventQueue bounds the pod events waiting for the hub's agent.
const podEventQueue = 256

// errStopped is the answer to a request once the daemon's loop has ended.
var errStopped = errors.New("the daemon has stopped")

// ExpectAssigned implements Assignments.
func (d *Daemon) ExpectAssigned(generation int64, stored []*v1.Pod) {
	d.podEvents = make(chan PodEvent, podEventQueue)
	d.assigned = withHubIdentity(stored)
	d.log.Info("hub pods", "generation", generation, "pods", len(stored))
}

// withHubIdentity returns copies of the hub's pods with their identity
// (source hub, a UID from their content).
func withHubIdentity(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		p = p.DeepCopy()
		manifest.Stamp(p, manifest.SourceHub, "")
		out = append(out, p)
	}
	return out
}

// applyDesired hands the core the file pods and the hub pods that may run
// (desiredPods decides).
func (d *Daemon) applyDesired() {
	if d.stoppingAll {
		return
	}
	pods, refused := desiredPods(d.manifests.Pods, d.assigned, d.cfg.Policy, d.classes)
	for _, r := range refused {
		key := r.pod.Namespace + "/" + r.pod.Name
		switch r.cause {
		case shadowed:
			d.log.Warn("hub pod shadowed by a manifest file of the same name", "pod", key)
		case byPolicy:
			// Accepted before under a laxer config: the device's word now wins.
			d.log.Warn("hub pod refused by this device's hub policy", "pod", key, "err", r.reason)
		default:
			d.log.Warn("hub pod refused", "pod", key, "err", r.reason)
		}
	}
	d.machine.SetDesired(pods)
}

// Conflicts implements Assignments with the decision that applies the pods.
func (d *Daemon) Conflicts(pods []*v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	hub := withHubIdentity(pods)
	err := d.do(func() error {
		_, refused := desiredPods(d.manifests.Pods, hub, d.cfg.Policy, d.classes)
		for _, r := range refused {
			key := r.pod.Namespace + "/" + r.pod.Name
			if r.cause == byPolicy {
				d.log.Warn("hub pod refused by this device's policy", "pod", key, "err", r.reason)
			}
			out[key] = r.reason
		}
		return nil
	})
	return out, err
}

// ApplyAssigned implements Assignments.
func (d *Daemon) ApplyAssigned(gen int64, pods []*v1.Pod) {
	hub := withHubIdentity(pods)
	for {
		err := d.do(func() error {
			d.assigned = hub
			d.log.Info("hub pods", "generation", gen, "pods", len(hub))
			d.applyDesired()
			return nil
		})
		if err == nil || errors.Is(err, errStopped) {
			return
		}
		d.log.Warn("applying hub pods; retrying", "generation", gen, "err", err)
	}
}

// PodEvents implements Assignments.
func (d *Daemon) PodEvents() <-chan PodEvent { return d.podEvents }

// hubEvent queues a pod event for the hub; a full queue drops it (the
// outbox would drop old events first anyway).
func (d *Daemon) podEvent(key, typ, reason, msg string, at time.Time) {
	if d.podEvents == nil {
		return
	}
	select {
	case d.podEvents <- PodEvent{Pod: key, Time: at, Type: typ, Reason: reason, Message: msg}:
	default:
	}
}
