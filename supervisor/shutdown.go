package supervisor

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

// DefaultShutdownBuckets stops non-critical pods within 20 s, then critical
// ones within 10 s, as shutdownGracePeriod 30s with
// shutdownGracePeriodCriticalPods 10s do in the kubelet.
func DefaultShutdownBuckets() []ShutdownBucket {
	return []ShutdownBucket{{Priority: 0, GracePeriod: 20 * time.Second}, {Priority: 2000000000, GracePeriod: 10 * time.Second}}
}

// ShutdownTime is how long a drain by these buckets may take at most.
func ShutdownTime(buckets []ShutdownBucket) time.Duration {
	if len(buckets) == 0 {
		buckets = DefaultShutdownBuckets()
	}
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

// shutdownMessage is the kubelet's message for pods stopped by a node
// shutdown.
const shutdownMessage = "Pod was terminated in response to imminent node shutdown."

// Drain stops every pod, lowest priority bucket first, and admits nothing
// until Uncordon. It returns once every pod has ended, or the buckets'
// time is up.
func (d *Daemon) Drain(reason string) error {
	var done chan struct{}
	err := d.do(func() error {
		if d.draining != nil {
			done = d.draining.done
			return nil
		}
		d.draining = &drain{reason: reason, buckets: drainPlan(d.cfg.ShutdownBuckets), timer: time.NewTimer(time.Hour), done: make(chan struct{})}
		d.log.Warn("draining the node: stopping pods by priority, lowest first", "reason", reason)
		done = d.draining.done
		d.advanceDrain()
		return nil
	})
	if err != nil {
		return err
	}
	<-done
	return nil
}

// Uncordon ends a drain: pods are admitted again, and those the drain
// stopped run again, as static pods do when a node boots after a shutdown.
// Pods a drain stopped before the daemon restarted (which forgot the
// drain) run again too.
func (d *Daemon) Uncordon() error {
	return d.do(func() error {
		draining := d.draining != nil
		if draining {
			select {
			case <-d.draining.done:
			default:
				return errors.New("the drain is still in progress")
			}
		}
		revived := 0
		for _, in := range d.machine.Instances() {
			if d.machine.Revive(in.UID()) {
				revived++
			}
		}
		if !draining && revived == 0 {
			return errors.New("the node is not draining")
		}
		d.draining = nil
		d.log.Info("node uncordoned: admitting pods again", "restarting", revived)
		return nil
	})
}

// advanceDrain starts the next bucket once the current one is done or out
// of time. It runs on the loop goroutine at the start of every step.
func (d *Daemon) advanceDrain() {
	dr := d.draining
	if dr == nil {
		return
	}
	select {
	case <-dr.done:
		return
	default:
	}
	now := d.now()
	if d.anyLive(dr.current) && now.Before(dr.deadline) {
		return
	}
	for dr.next < len(dr.buckets) {
		b := dr.buckets[dr.next]
		dr.current = bucketPods(drainCandidates(d.machine.Instances()), dr.buckets, dr.next)
		dr.next++
		for _, uid := range dr.current {
			d.execute(d.machine.Fail(uid, lifecycle.ReasonNodeShutdown, fmt.Sprintf("%s (%s)", shutdownMessage, dr.reason), b.GracePeriod, now))
		}
		if len(dr.current) > 0 {
			dr.deadline = now.Add(b.GracePeriod)
			resetTimer(dr.timer, dr.deadline, now)
			d.log.Info("stopping a shutdown bucket", "fromPriority", b.Priority, "pods", len(dr.current), "grace", b.GracePeriod)
			return
		}
	}
	if !d.anyLive(nil) {
		close(dr.done)
		d.log.Warn("drain complete: no pod is running")
		return
	}
	// Pods not in any bucket's range are gone through the last bucket;
	// what still runs is being killed.
	resetTimer(dr.timer, now.Add(100*time.Millisecond), now)
}

// anyLive reports whether any of the instances (all, when uids is nil)
// still has a process.
func (d *Daemon) anyLive(uids []types.UID) bool {
	if uids == nil {
		for _, in := range d.machine.Instances() {
			if in.Live() {
				return true
			}
		}
		return false
	}
	for _, uid := range uids {
		if in := d.machine.Instance(uid); in != nil && in.Live() {
			return true
		}
	}
	return false
}
