package nodeprotect

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

// Decision is what a look at the signals asks of the loop.
type Decision struct {
	// Reclaim: remove finished containers, rotated logs and unused
	// images, in that order, before any pod is evicted for disk.
	Reclaim bool
	// Evict is the pod to evict (nil: none).
	Evict *Eviction
}

// Eviction is one pod to evict (lifecycle.Machine.Evict).
type Eviction struct {
	Pod types.UID
	// Signal is the eviction signal whose threshold was met
	// (kubelet_evictions' eviction_signal).
	Signal eviction.Signal
	// Message is the pod's status message, the kubelet's.
	Message     string
	GracePeriod time.Duration
	// Event is the message of the ReasonThresholdMet event the victim
	// gets first: the thresholds met and what woke the look.
	Event string
	At    time.Time
}

// ReasonThresholdMet is the event an eviction's victim gets before its
// Evicted: which thresholds were met and what made the daemon look. The
// kubelet gives its node an event of this reason.
const ReasonThresholdMet = "EvictionThresholdMet"

// Wake looks at the signals for what the notifier says woke it, after a
// receive from Woken.
func (p *Protector) Wake(ctx context.Context, pods Pods) Decision {
	if why := p.notifier.Take(); why != 0 {
		return p.Look(ctx, why, pods)
	} // else an earlier look took this poke's cause and saw what it saw
	return Decision{}
}

// Look observes the signals, updates the node conditions and chooses a pod
// to evict if a threshold is met. why is what woke it: an eviction
// records it on the victim, so that an eviction the kernel's events
// brought at once can be told from one the safety net found late.
func (p *Protector) Look(ctx context.Context, why pressure.Wake, pods Pods) Decision {
	now := p.now()
	obs := p.observer.Observe()
	if p.observed != nil {
		p.observed(obs)
	}
	st := p.mgr.Synchronize(obs, now)
	p.conditions = st.Conditions
	p.rearmThreshold(ctx, obs)
	met := len(st.Met) > 0
	defer p.recheck.Reset(lifecycle.WakeIn(eviction.NextLook(st.NextCheck, now, met), now))
	live := func(uid types.UID) bool {
		in := pods.Instance(uid)
		return in != nil && in.Live()
	}
	if !p.pacer.Look(met, live) {
		return Decision{}
	}
	victim, reclaim := p.mgr.Select(st.Met, p.podStats(pods), p.pacer.Reclaimed())
	switch p.pacer.Chose(victim, reclaim) {
	case eviction.TurnReclaim:
		p.log.Info("disk pressure: reclaiming finished containers, rotated logs and unused images first")
		return Decision{Reclaim: true}
	case eviction.TurnNoVictim:
		p.log.Warn("eviction threshold met but no pod can be evicted", "thresholds", st.Met)
	case eviction.TurnEvict:
		p.log.Warn("evicting pod", "pod", victim.Pod.Name, "grace", victim.GracePeriod, "why", victim.Message, "wokenBy", why.String())
		return Decision{Evict: &Eviction{Pod: victim.Pod.UID, Signal: victim.Signal, Message: victim.Message, GracePeriod: victim.GracePeriod,
			Event: thresholdsMet(st.Met, why), At: now}}
	}
	return Decision{}
}

// rearmThreshold moves the memory threshold event to where
// memory.available crosses its hard threshold. Re-armed after every look:
// the kubelet's memcg notifier does so too, since inactive file pages move
// the crossing point.
func (p *Protector) rearmThreshold(ctx context.Context, obs map[eviction.Signal]eviction.Observation) {
	if p.threshold == nil || p.memLimit <= 0 {
		return
	}
	if usage, inactive, err := pressure.RootUsage(p.memoryCgroup); err == nil {
		level := obs[eviction.MemoryAvailable].Capacity - p.memLimit + inactive
		if err := p.threshold.Set(ctx, max(level, usage+1)); err != nil {
			p.log.Warn("memory threshold notification unavailable", "err", err)
			p.threshold = nil
		}
	}
}

func thresholdsMet(met []eviction.Threshold, why pressure.Wake) string {
	names := make([]string, len(met))
	for i, t := range met {
		names[i] = t.String()
	}
	return fmt.Sprintf("eviction threshold met (%s); woken by the %s", strings.Join(names, ", "), why)
}

// podStats describes every running pod for eviction ranking.
func (p *Protector) podStats(pods Pods) []eviction.PodStats {
	var out []eviction.PodStats
	for _, in := range pods.Instances() {
		if in.Failed != nil || in.Terminating || !in.Live() {
			continue
		}
		pod := in.Pod
		prio := lifecycle.PriorityOf(pod)
		req := resources.PodRequests(pod)
		ps := eviction.PodStats{
			UID: pod.UID, Name: in.Key(), Priority: prio, Critical: priority.IsCritical(prio),
			MemoryReq: req.Memory().Value(), DiskReq: req.StorageEphemeral().Value(),
		}
		if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			ps.GracePeriod = time.Duration(*g) * time.Second
		}
		if p.usage != nil {
			u := p.usage(pod)
			ps.MemoryUsage, ps.Processes, ps.DiskUsage = u.MemoryWorkingSet, u.Processes, u.Disk
		}
		out = append(out, ps)
	}
	return out
}
