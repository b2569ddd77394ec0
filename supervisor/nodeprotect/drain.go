package nodeprotect

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// ShutdownBucket is one step of a graceful node shutdown: pods with
// priority from Priority up to the next bucket's get GracePeriod.
type ShutdownBucket struct {
	Priority    int32
	GracePeriod time.Duration
}

// ShutdownTime is how long a drain by these buckets may take at most.
func ShutdownTime(buckets []ShutdownBucket) time.Duration {
	var total time.Duration
	for _, b := range buckets {
		total += b.GracePeriod
	}
	return total
}

// drain is a node shutdown or drain in progress.
type drain struct {
	reason   string
	buckets  []ShutdownBucket
	next     int       // bucket to start next
	deadline time.Time // when the current bucket's time is up
	current  []types.UID
	timer    *time.Timer
	done     chan struct{}
}

// Stop is one pod a drain stops (lifecycle.Machine.Fail with Reason).
type Stop struct {
	Pod         types.UID
	Reason      string // lifecycle.ReasonNodeShutdown
	Message     string
	GracePeriod time.Duration
	At          time.Time
}

// shutdownMessage is the kubelet's message for pods stopped by a node
// shutdown.
const shutdownMessage = "Pod was terminated in response to imminent node shutdown."

// Drain starts stopping every pod, lowest priority bucket first; nothing
// is admitted until Uncordon. It returns the pods to stop now, and done,
// which closes once every pod has ended or the buckets' time is up. A
// drain already under way goes on: its done is returned.
func (p *Protector) Drain(reason string, pods Pods) (done <-chan struct{}, stops []Stop) {
	if p.draining != nil {
		return p.draining.done, nil
	}
	p.draining = &drain{reason: reason, buckets: drainPlan(p.buckets), timer: time.NewTimer(time.Hour), done: make(chan struct{})}
	p.log.Warn("draining the node: stopping pods by priority, lowest first", "reason", reason)
	return p.draining.done, p.AdvanceDrain(pods)
}

// Draining says whether a drain is under way or over but not uncordoned.
func (p *Protector) Draining() bool { return p.draining != nil }

// DrainTimer is ready when the drain's current bucket is out of time (nil,
// never ready, without a drain): call AdvanceDrain.
func (p *Protector) DrainTimer() <-chan time.Time {
	if p.draining == nil {
		return nil
	}
	return p.draining.timer.C
}

// Uncordon ends a drain: pods are admitted again. revive runs the pods
// the drain stopped again, as static pods do when a node boots after a
// shutdown, and says how many; pods a drain stopped before the daemon
// restarted (which forgot the drain) run again too. A drain still in
// progress is an error, and so is a node neither draining nor revived.
func (p *Protector) Uncordon(revive func() int) error {
	draining := p.draining != nil
	if draining {
		select {
		case <-p.draining.done:
		default:
			return errors.New("the drain is still in progress")
		}
	}
	revived := revive()
	if !draining && revived == 0 {
		return errors.New("the node is not draining")
	}
	p.draining = nil
	p.log.Info("node uncordoned: admitting pods again", "restarting", revived)
	return nil
}

// AdvanceDrain starts the next bucket once the current one is done or out
// of time, returning the pods to stop. The loop calls it after every step
// and DrainTimer.
func (p *Protector) AdvanceDrain(pods Pods) []Stop {
	dr := p.draining
	if dr == nil {
		return nil
	}
	select {
	case <-dr.done:
		return nil
	default:
	}
	now := p.now()
	if anyLive(pods, dr.current) && now.Before(dr.deadline) {
		return nil
	}
	for dr.next < len(dr.buckets) {
		b := dr.buckets[dr.next]
		dr.current = bucketPods(drainCandidates(pods.Instances()), dr.buckets, dr.next)
		dr.next++
		if len(dr.current) == 0 {
			continue
		}
		stops := make([]Stop, 0, len(dr.current))
		for _, uid := range dr.current {
			stops = append(stops, Stop{Pod: uid, Reason: lifecycle.ReasonNodeShutdown,
				Message: fmt.Sprintf("%s (%s)", shutdownMessage, dr.reason), GracePeriod: b.GracePeriod, At: now})
		}
		dr.deadline = now.Add(b.GracePeriod)
		dr.timer.Reset(lifecycle.WakeIn(dr.deadline, now))
		p.log.Info("stopping a shutdown bucket", "fromPriority", b.Priority, "pods", len(dr.current), "grace", b.GracePeriod)
		return stops
	}
	if !anyLive(pods, nil) {
		close(dr.done)
		p.log.Warn("drain complete: no pod is running")
		return nil
	}
	// Pods not in any bucket's range are gone through the last bucket;
	// what still runs is being killed.
	dr.timer.Reset(lifecycle.WakeIn(now.Add(100*time.Millisecond), now))
	return nil
}

// anyLive reports whether any of the instances (all, when uids is nil)
// still has a process.
func anyLive(pods Pods, uids []types.UID) bool {
	if uids == nil {
		for _, in := range pods.Instances() {
			if in.Live() {
				return true
			}
		}
		return false
	}
	for _, uid := range uids {
		if in := pods.Instance(uid); in != nil && in.Live() {
			return true
		}
	}
	return false
}
