package desired

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/lease"
	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// gate is what holds hub pods back from running: the hub's fence (the
// device was declared dead; the pods it names run elsewhere) and the
// self-fencing leases (lease.Annotation), renewed from the hub's answers.
type gate struct {
	fence      map[string]bool // namespace/name
	generation int64           // the document that carried the fence
	noted      map[string]bool // fenced pods whose stop was reported
	lease      lease.Device
	leases     bool // some hub pod has a lease
	// next is when the nearest lease runs out (zero: none holds), on
	// clock, the lease clock (lease.Now; a test's own).
	next  time.Time
	clock func() time.Time
}

func (s *Pods) setFence(generation int64, fence []string) {
	s.gate.fence = nil
	if len(fence) == 0 || s.gate.noted == nil {
		s.gate.noted = map[string]bool{} // a stop is reported once per fence
	}
	s.gate.generation = generation
	if len(fence) > 0 {
		s.gate.fence = make(map[string]bool, len(fence))
		for _, k := range fence {
			s.gate.fence[k] = true
		}
		s.log.Warn("this device is fenced by its hub: the pods the fence names do not run here", "generation", generation, "pods", len(fence))
	}
	s.gate.leases = false
	for _, p := range s.hub {
		if _, ok, _ := lease.Of(p); ok {
			s.gate.leases = true
		}
	}
}

// Renew renews the self-fencing leases at sent: the send time, on the
// lease clock (lease.Now), of a heartbeat the hub answered.
func (s *Pods) Renew(sent time.Time) { s.gate.lease.Renew(sent) }

// Renewed is the last renewal, on the lease clock (zero: none).
func (s *Pods) Renewed() time.Time { return s.gate.lease.Renewed() }

// SetLeaseClock replaces the lease clock (lease.Now), for tests.
func (s *Pods) SetLeaseClock(now func() time.Time) { s.gate.clock = now }

func (s *Pods) leaseNow() time.Time {
	if s.gate.clock == nil {
		return lease.Now()
	}
	return s.gate.clock()
}

// Gated says whether Gate's answer can change with time or with the
// machine's instances (a fence, or a pod with a lease): the daemon then
// gates at every step, else only when Desired changes.
func (s *Pods) Gated() bool { return !s.retired && (len(s.gate.fence) > 0 || s.gate.leases) }

// NextExpiry is how long until the nearest lease that holds runs out;
// false when none holds.
func (s *Pods) NextExpiry() (time.Duration, bool) {
	if s.gate.next.IsZero() {
		return 0, false
	}
	return max(s.gate.next.Sub(s.leaseNow()), 0), true
}

// FenceGeneration is the generation of the document whose fence is in
// force.
func (s *Pods) FenceGeneration() int64 { return s.gate.generation }

// Gated is Gate's answer.
type Gated struct {
	// Pods are what the machine is to run.
	Pods []*v1.Pod
	// Stop are the instances whose lease ran out: the daemon stops them
	// (Machine.Disrupt, reason lifecycle.ReasonLeaseExpired, Message).
	Stop    []*lifecycle.Instance
	Message map[types.UID]string
	// Revive are the instances a lease stopped whose lease holds again.
	Revive []types.UID
	// Fenced are the fenced hub pods still running: no other hub pod
	// starts until they are gone; NewlyFenced are those not reported
	// before.
	Fenced, NewlyFenced []string
}

// Gate filters Desired's pods, given the machine's instances, at the
// lease clock's now:
//   - a hub pod the fence names never runs; while one still runs, no hub
//     pod starts that is not running already (stop before start);
//   - a hub pod with a lease starts only while its lease holds; one
//     running when it runs out is stopped, and runs again (revived) once
//     a renewal makes it hold again.
func (s *Pods) Gate(instances []*lifecycle.Instance) Gated {
	var g Gated
	if s.retired {
		return g // every pod is stopping: nothing is desired again
	}
	now := s.leaseNow()
	byUID := make(map[types.UID]*lifecycle.Instance, len(instances))
	for _, in := range instances {
		byUID[in.UID()] = in
		if s.gate.fence[in.Key()] && fromHub(in.Pod) && in.Live() {
			g.Fenced = append(g.Fenced, in.Key())
			if !s.gate.noted[in.Key()] {
				s.gate.noted[in.Key()] = true
				g.NewlyFenced = append(g.NewlyFenced, in.Key())
			}
		}
	}
	s.gate.next = time.Time{}
	for _, p := range s.want {
		if !fromHub(p) {
			g.Pods = append(g.Pods, p)
			continue
		}
		key := lifecycle.KeyOf(p)
		in := byUID[p.UID]
		if s.gate.fence[key] || (len(g.Fenced) > 0 && in == nil) {
			continue
		}
		if d, ok, err := lease.Of(p); ok && err == nil {
			if !s.gate.lease.Valid(d, now) {
				if in == nil {
					continue // not started without a lease
				}
				if in.Failed == nil && !in.Terminating {
					g.Stop = append(g.Stop, in)
					if g.Message == nil {
						g.Message = map[types.UID]string{}
					}
					g.Message[in.UID()] = leaseMessage(d, s.gate.lease.Renewed(), now)
				}
			} else {
				if e := s.gate.lease.Expiry(d); s.gate.next.IsZero() || e.Before(s.gate.next) {
					s.gate.next = e
				}
				if in != nil && in.Failed != nil && in.Failed.Reason == lifecycle.ReasonLeaseExpired {
					g.Revive = append(g.Revive, in.UID())
				}
			}
		}
		g.Pods = append(g.Pods, p)
	}
	return g
}

// leaseMessage says why a lease stopped a pod.
func leaseMessage(d time.Duration, renewed, now time.Time) string {
	if renewed.IsZero() {
		return fmt.Sprintf("Pod was terminated: its self-fencing lease (%s=%d) expired: the hub has not answered since the daemon started",
			lease.Annotation, int(d.Seconds()))
	}
	return fmt.Sprintf("Pod was terminated: its self-fencing lease (%s=%d) expired: the hub last answered %s ago",
		lease.Annotation, int(d.Seconds()), now.Sub(renewed).Round(time.Second))
}

func fromHub(p *v1.Pod) bool { return p.Annotations[manifest.AnnotationSource] == manifest.SourceHub }
