package desired

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
)

// PodEvent is an event about a pod, as describe shows it.
type PodEvent struct {
	Pod                   string // namespace/name
	Time                  time.Time
	Type, Reason, Message string
}

// podEventQueue bounds the pod events waiting for the hub's agent.
const podEventQueue = 256

// ExpectHub says a hub is attached, with the hub pods it accepted before
// (stored on the device): they are desired from the first reconciliation,
// even with the hub out of reach. Call it before the daemon's loop runs.
func (s *Pods) ExpectHub(generation int64, stored []*v1.Pod, fence []string) {
	s.events = make(chan PodEvent, podEventQueue)
	s.hub = withHubIdentity(stored)
	s.setFence(generation, fence)
	s.log.Info("hub pods", "generation", generation, "pods", len(stored))
}

// HubAttached reports whether ExpectHub was called.
func (s *Pods) HubAttached() bool { return s.events != nil }

// SetHub makes the hub pods exactly these; Desired then includes those
// that may run.
func (s *Pods) SetHub(generation int64, pods []*v1.Pod, fence []string) {
	s.hub = withHubIdentity(pods)
	s.setFence(generation, fence)
	s.log.Info("hub pods", "generation", generation, "pods", len(s.hub))
}

// Conflicts are the verdicts on hub pods that cannot run here, by
// namespace/name with the reason: the decision Desired would make if the
// hub's pods were these.
func (s *Pods) Conflicts(pods []*v1.Pod) map[string]string {
	out := map[string]string{}
	_, refused := desiredPods(s.files.Pods, withHubIdentity(pods), s.policy, s.classes)
	for _, r := range refused {
		key := r.pod.Namespace + "/" + r.pod.Name
		if r.cause == byPolicy {
			s.log.Warn("hub pod refused by this device's policy", "pod", key, "err", r.reason)
		}
		out[key] = r.reason
	}
	return out
}

// Events are the pod events queued for the hub since ExpectHub (nil
// without a hub).
func (s *Pods) Events() <-chan PodEvent { return s.events }

// QueueEvent queues a pod event for the hub, if one is attached; a full
// queue drops it (the outbox would drop old events first anyway).
func (s *Pods) QueueEvent(ev PodEvent) {
	if s.events == nil {
		return
	}
	select {
	case s.events <- ev:
	default:
	}
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
