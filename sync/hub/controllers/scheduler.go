// Package controllers drives the hub's controllers over the fleet
// database: today the scheduling loop, which runs sync/hub/schedule's
// passes (the workload controllers, the scheduler, the taint manager),
// stores their plans and has the device link publish the desired
// documents that changed.
package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/sync/hub/devicelink"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/hub/schedule"
	"github.com/podvisor/podvisor/sync/hub/schedule/disruption"
)

// minPassGap spaces the passes: the requests of a busy fleet (every
// heartbeat asks) coalesce into at most one pass a second.
const minPassGap = time.Second

// Config is what the scheduler is told of the hub.
type Config struct {
	// DeviceTimeout is how long a device may be silent and still be
	// Ready (default fleetdb.DefaultDeviceTimeout); it is tainted
	// unreachable after.
	DeviceTimeout time.Duration
	// Now is the clock (default time.Now); tests pass a fake one.
	Now func() time.Time
}

// Scheduler runs the scheduling passes over the fleet, one at a time.
type Scheduler struct {
	cfg       Config
	fleet     *fleetdb.Fleet
	workloads *workloaddb.Store
	// link publishes the desired documents the passes change.
	link *devicelink.Link
	log  *slog.Logger
	now  func() time.Time
	done chan struct{}
	// kick asks the scheduling loop for a pass; started is when this hub
	// started (a device never heard from is unreachable since then).
	kick    chan struct{}
	started time.Time
	// sched is what one scheduling pass keeps for the next.
	sched schedCache
	// gate, when set, says whether this replica may run passes: the
	// leader only (SetGate); forward asks the leader for the pass the
	// gate refused.
	gate    func() bool
	forward func()
	// stopped is closed when the loop Start started has returned.
	stopped chan struct{}
}

// SetGate makes the loop's passes wait for leading to say true (several
// replicas: the leader schedules, the others do not); Reschedule once it
// does. A pass asked for while it says false is handed to forward, when
// set (nil: dropped): how the leader hears of a write made through
// another replica. Set before Start.
func (s *Scheduler) SetGate(leading func() bool, forward func()) {
	s.gate, s.forward = leading, forward
}

// minForwardGap spaces the passes a replica that does not lead asks the
// leader for: requests coalesce into at most ten a second, and the
// leader's into its passes.
const minForwardGap = 100 * time.Millisecond

// New makes a scheduler; Start starts its loop.
func New(cfg Config, fleet *fleetdb.Fleet, workloads *workloaddb.Store, link *devicelink.Link, log *slog.Logger) *Scheduler {
	if cfg.DeviceTimeout <= 0 {
		cfg.DeviceTimeout = fleetdb.DefaultDeviceTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scheduler{cfg: cfg, fleet: fleet, workloads: workloads, link: link, log: log, now: cfg.Now,
		done: make(chan struct{}), kick: make(chan struct{}, 1), started: cfg.Now()}
}

// Start starts the scheduling loop, with a first pass; the hub counts
// its devices' silence from now.
func (s *Scheduler) Start() {
	s.started = s.now()
	s.stopped = make(chan struct{})
	go func() {
		defer close(s.stopped)
		s.scheduleLoop()
	}()
	s.Reschedule()
}

// Close stops the scheduling loop and waits for the pass it runs, if
// any, to end: a replica that hands the leader lease over stops
// scheduling first.
func (s *Scheduler) Close() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	if s.stopped != nil {
		<-s.stopped
	}
}

// Reschedule asks for a scheduling pass soon. Requests coalesce: one
// pass answers every request made before it starts.
func (s *Scheduler) Reschedule() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// scheduleLoop runs the passes, one at a time: on request and at the
// next moment the fleet changes by itself (a device's heartbeat goes
// stale, a toleration runs out) — a timer, not polling.
func (s *Scheduler) scheduleLoop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-s.done:
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C:
		}
		started, gap := time.Now(), minPassGap
		if s.gate != nil && !s.gate() {
			// Another replica leads: it runs the pass (and this one a kick
			// when it leads).
			timer.Stop()
			if s.forward == nil {
				continue
			}
			s.forward()
			gap = minForwardGap
		} else {
			next, err := s.SchedulePass()
			if err != nil {
				s.log.Error("scheduling pass", "err", err)
				next = s.now().Add(10 * time.Second) // try again
			}
			timer.Stop()
			if !next.IsZero() {
				timer.Reset(max(next.Sub(s.now()), 100*time.Millisecond))
			}
		}
		select {
		case <-s.done:
			return
		case <-time.After(gap - time.Since(started)):
		}
	}
}

// SchedulePass runs the scheduler over the fleet once and stores its
// plan: new pods, bindings, pending reasons, graceful deletions and
// events; terminating pods the device confirmed stopped are forgotten,
// and the desired documents of devices whose pods changed are signed
// again. It returns when the fleet will next change by itself.
func (s *Scheduler) SchedulePass() (time.Time, error) {
	now := s.now()
	c := &s.sched
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	if idle, err := s.workloads.NothingToSchedule(); err != nil || idle {
		// A fleet without workloads or hub pods costs no pass; their
		// last pods left the desired documents before they were forgotten.
		return time.Time{}, err
	}
	// Across replicas too: no eviction or delete of another replica's API
	// commits between this pass's reads and its writes.
	unlock, err := s.workloads.LockScheduling(context.Background())
	if err != nil {
		return time.Time{}, err
	}
	defer unlock()
	devices, next, err := s.scheduleDevices(now)
	if err != nil {
		return time.Time{}, err
	}
	w, err := s.workloads.LoadWorkloads()
	if err != nil {
		return time.Time{}, err
	}
	pods, hashes, err := c.hubPods(s.workloads)
	if err != nil {
		return time.Time{}, err
	}
	observed, err := s.observed(pods)
	if err != nil {
		return time.Time{}, err
	}
	revisions, err := s.revisions()
	if err != nil {
		return time.Time{}, err
	}
	plan := schedule.Schedule(schedule.Input{Now: now, Devices: devices, DaemonSets: w.DaemonSets,
		Deployments: w.Deployments, StatefulSets: w.StatefulSets, Pods: pods, PriorityClasses: w.PriorityClasses, PDBs: w.PDBs,
		MaxPods: workloaddb.MaxHubPods, Observed: observed, Revisions: revisions})
	rollouts := rolloutWrites(w, plan)
	if pods, err = s.storePlan(pods, hashes, plan, rollouts, now); err != nil {
		return time.Time{}, fmt.Errorf("storing the plan: %w", err)
	}
	// Readers of workloads (watches, the dashboard) look again.
	s.fleet.Changes().Publish("", fleetwatch.Workloads)
	if err := s.pushScheduled(pods, hashes, devices, w.PriorityClasses); err != nil {
		return time.Time{}, err
	}
	forgot := 0
	if slices.ContainsFunc(pods, func(p *v1.Pod) bool { return p.Spec.NodeName != "" && p.DeletionTimestamp != nil }) {
		// Only a terminating pod can be forgotten: a pass without one
		// skips the query.
		if forgot, err = s.forgetStopped(devices); err != nil {
			return time.Time{}, err
		}
	}
	if forgot > 0 || slices.ContainsFunc(plan.Deletions, func(d schedule.Deletion) bool { return d.Force }) {
		// Their room is free: a nominated pod may bind now, and a
		// StatefulSet remake a pod of a name this pass forgot.
		s.Reschedule()
	}
	return earliest(earliest(next, tolerationDeadline(devices, pods)), plan.Wake), nil
}

// scheduleDevices makes every device a schedule.Device, and says when
// the first Ready one goes stale if it is not heard from.
func (s *Scheduler) scheduleDevices(now time.Time) ([]schedule.Device, time.Time, error) {
	ds, err := s.fleet.Devices(now, s.cfg.DeviceTimeout)
	if err != nil {
		return nil, time.Time{}, err
	}
	extra, err := s.fleet.DeviceScheduling()
	if err != nil {
		return nil, time.Time{}, err
	}
	var next time.Time
	out := make([]schedule.Device, 0, len(ds))
	for _, d := range ds {
		sd := schedule.Device{Name: d.ID, Labels: maps.Clone(d.Labels)}
		if d.Node != nil {
			sd.Allocatable, sd.Conditions = d.Node.Allocatable, d.Node.Conditions
			setIfAbsent(sd.Labels, v1.LabelArchStable, d.Node.NodeInfo.Architecture)
			setIfAbsent(sd.Labels, v1.LabelOSStable, d.Node.NodeInfo.OperatingSystem)
		}
		sd.Labels[v1.LabelHostname] = d.ID
		if e, ok := extra[d.ID]; ok {
			sd.Unschedulable, sd.Taints, sd.Fenced = e.Unschedulable, e.Taints, e.Fenced
		}
		var wake time.Time
		sd.UnreachableSince, wake = silence(d.Ready, d.LastSeen, s.started, s.cfg.DeviceTimeout, now)
		next = earliest(next, wake)
		out = append(out, sd)
	}
	return out, next, nil
}

// silence is when the hub counts a device unreachable from (zero while
// it is Ready), and when that changes by itself. As the node lifecycle
// controller after a restart, the hub gives every device it has not heard
// from since it started a full timeout to be heard, and counts its
// silence from then: a hub that was down does not evict the fleet as it
// comes up, and a self-fencing lease is never counted from a time the hub
// learnt from before it started (see workloads.LeaseExpiry).
func silence(ready bool, lastSeen, started time.Time, timeout time.Duration, now time.Time) (since, wake time.Time) {
	grace := started.Add(timeout)
	switch {
	case ready:
		return time.Time{}, lastSeen.Add(timeout)
	case lastSeen.After(started):
		return lastSeen, time.Time{} // offline, or silent, since
	case now.Before(grace):
		return time.Time{}, grace
	default:
		return grace, time.Time{}
	}
}

func setIfAbsent(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok && v != "" {
		m[k] = v
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// tolerationDeadline is when the first pod on a device with a timed
// NoExecute taint (unreachable, not-ready, or the operator's) runs out
// of its toleration of it, so the taint manager's eviction is on time.
func tolerationDeadline(devices []schedule.Device, pods []*v1.Pod) time.Time {
	taints := map[string][]v1.Taint{}
	for i := range devices {
		d := &devices[i]
		if len(d.Taints) == 0 && d.UnreachableSince.IsZero() && d.Ready() {
			continue // no NoExecute taint: the common case costs nothing
		}
		for _, t := range d.NodeTaints() {
			if t.Effect == v1.TaintEffectNoExecute && t.TimeAdded != nil {
				taints[d.Name] = append(taints[d.Name], t)
			}
		}
	}
	var next time.Time
	for _, p := range pods {
		ts := taints[p.Spec.NodeName]
		if len(ts) == 0 || p.DeletionTimestamp != nil {
			continue
		}
		for i := range ts {
			for _, tol := range p.Spec.Tolerations {
				if tol.TolerationSeconds != nil && tol.ToleratesTaint(logr.Discard(), &ts[i], false) {
					next = earliest(next, ts[i].TimeAdded.Add(time.Duration(*tol.TolerationSeconds)*time.Second))
				}
			}
		}
	}
	return next
}

// storePlan writes one pass's plan in one transaction, touching only the
// pods it changes, and returns the pods the hub then holds. The pods
// before are the cache's: a pod the plan changes is copied first. hashes
// (the stored bytes' hashes by pod) follow what it writes.
func (s *Scheduler) storePlan(before []*v1.Pod, hashes map[types.NamespacedName]uint64, plan schedule.Plan, rollouts workloaddb.PodWrites, now time.Time) ([]*v1.Pod, error) {
	c := &s.sched
	pods, changed, gone := applyPlan(before, plan, now)
	w := rollouts
	w.PDBs = plan.PDBs
	after := make([]*v1.Pod, 0, len(pods))
	for k, p := range pods {
		if gone[k] {
			c.forget(k)
			delete(hashes, k)
			w.Delete = append(w.Delete, k)
			continue
		}
		after = append(after, p)
		if !changed[k] {
			continue // as stored: the scheduler changes no pod it is given
		}
		raw, _ := json.Marshal(p)
		h := c.hash(raw)
		if old, ok := hashes[k]; ok && old == h {
			continue
		}
		// The next pass gets the pod as stored (times to the second), as
		// it did before the cache.
		c.remember(k, h, raw)
		hashes[k] = h
		w.Put = append(w.Put, workloaddb.PodWrite{Key: k, Device: p.Spec.NodeName, Raw: raw})
	}
	for _, e := range plan.Events {
		w.Events = append(w.Events, workloaddb.SchedEvent{Kind: e.Kind, Namespace: e.Namespace, Name: e.Name, Type: e.Type,
			Reason: e.Reason, Message: e.Message})
	}
	if err := s.workloads.StorePods(w, now); err != nil {
		return nil, err
	}
	slices.SortFunc(after, func(a, b *v1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return after, nil
}

// applyPlan applies a plan to the pods before, copying a pod before it
// changes it (they are the cache's): pods are the pods after, by key,
// changed those the plan made or changed, and gone those it deletes at
// once (never on a device: nothing to stop).
func applyPlan(before []*v1.Pod, plan schedule.Plan, now time.Time) (pods map[types.NamespacedName]*v1.Pod, changed, gone map[types.NamespacedName]bool) {
	pods = make(map[types.NamespacedName]*v1.Pod, len(before)+len(plan.Create))
	for _, p := range before {
		pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	// changed are the pods the plan may change, each a copy of its own.
	changed = map[types.NamespacedName]bool{}
	mutable := func(k types.NamespacedName) *v1.Pod {
		p := pods[k]
		if p != nil && !changed[k] {
			p = p.DeepCopy()
			pods[k], changed[k] = p, true
		}
		return p
	}
	for _, p := range plan.Create {
		k := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		pods[k], changed[k] = p, true
	}
	for _, b := range plan.Bindings {
		if p := mutable(b.Pod); p != nil {
			p.Spec.NodeName = b.Device
			p.Status.NominatedNodeName = ""
			setScheduled(p, v1.ConditionTrue, "", "", now)
		}
	}
	for _, pe := range plan.Pending {
		if p := mutable(pe.Pod); p != nil {
			p.Status.Phase = v1.PodPending
			p.Status.NominatedNodeName = pe.NominatedNodeName
			setScheduled(p, v1.ConditionFalse, v1.PodReasonUnschedulable, pe.Message, now)
		}
	}
	gone = map[types.NamespacedName]bool{}
	for _, d := range plan.Deletions {
		p := mutable(d.Pod)
		if p == nil {
			continue
		}
		if p.Spec.NodeName == "" || d.Force {
			// Never on a device, nothing to stop; or forced: the hub knows
			// it cannot run (a fenced device, a lease run out).
			gone[d.Pod] = true
			continue
		}
		if p.DeletionTimestamp == nil {
			t := metav1.NewTime(now)
			p.DeletionTimestamp = &t
			p.Status.Reason, p.Status.Message = d.Reason, d.Message
			if d.Disruption != "" {
				disruption.SetTarget(p, d.Disruption, now)
			}
		}
	}
	return pods, changed, gone
}

// setScheduled sets the PodScheduled condition, keeping its transition
// time while the status stays.
func setScheduled(p *v1.Pod, status v1.ConditionStatus, reason, message string, now time.Time) {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type != v1.PodScheduled {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return
	}
	p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodScheduled, Status: status,
		Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(now)})
}

// pushScheduled signs again the desired document of every device whose
// scheduled pods changed: the bound pods that are not terminating, as
// the device runs them, next to the pods applied to it by hand.
//
// It compares cheaply what it can: each pod as its device gets it is
// encoded again only when the pod's stored bytes or the classes changed,
// and a device's stored document is read again only when its bytes, or
// the pods wanted there, changed since they were last found to agree.
func (s *Scheduler) pushScheduled(pods []*v1.Pod, hashes map[types.NamespacedName]uint64, fleet []schedule.Device, pcs []*schedulingv1.PriorityClass) error {
	c := &s.sched
	known := make(map[string]bool, len(fleet))
	for _, d := range fleet {
		known[d.Name] = true
	}
	want := c.wantedPods(pods, hashes, pcs)
	c.pruneDevicePods(hashes)
	stored, err := c.storedDesired(s.fleet)
	if err != nil {
		return err
	}
	var errs []error
	devices := slices.Sorted(maps.Keys(want))
	for dev := range stored {
		if _, ok := want[dev]; !ok {
			devices = append(devices, dev)
		}
	}
	for dev := range c.pushed {
		if _, ok := stored[dev]; !ok {
			delete(c.pushed, dev)
		}
	}
	for _, dev := range devices {
		if err := s.pushDevice(dev, want[dev], stored[dev], known[dev]); err != nil {
			// One device's document (too large, say) holds back no other's.
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wantedPods are the bound pods that are not terminating, by device, as
// each device gets them.
func (c *schedCache) wantedPods(pods []*v1.Pod, hashes map[types.NamespacedName]uint64, pcs []*schedulingv1.PriorityClass) map[string][]json.RawMessage {
	classes := make(map[string]*schedulingv1.PriorityClass, len(pcs))
	for _, pc := range pcs {
		classes[pc.Name] = pc
	}
	rawClasses, _ := json.Marshal(pcs)
	classesHash := c.hash(rawClasses)
	want := map[string][]json.RawMessage{}
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			k := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			raw := c.devicePod(k, hashes[k], classesHash, func() *v1.Pod { return devicePod(p, classes[p.Spec.PriorityClassName]) })
			want[p.Spec.NodeName] = append(want[p.Spec.NodeName], raw)
		}
	}
	return want
}

// pushDevice signs again a device's desired document with the scheduled
// pods want, unless its stored one has them (stored: the hash of its
// stored pods); a device no longer in the fleet (not known) gets nothing
// new.
func (s *Scheduler) pushDevice(dev string, want []json.RawMessage, stored uint64, known bool) error {
	c := &s.sched
	wantHash := c.hashPods(want)
	if p, ok := c.pushed[dev]; ok && p.stored == stored && p.want == wantHash {
		return nil // the document is as it was when it agreed
	}
	storedHash, equal, err := c.scheduledMatch(s.fleet, dev, want)
	if err != nil {
		return err
	}
	if equal {
		c.pushed[dev] = pushedDoc{stored: storedHash, want: wantHash}
		return nil
	}
	if !known {
		return nil // a device removed from the fleet gets nothing new
	}
	if _, err := s.link.Update(dev, func(cur []json.RawMessage) []json.RawMessage {
		keep := cur[:0:0]
		for _, raw := range cur {
			if !scheduledPod(raw) {
				keep = append(keep, raw)
			}
		}
		return append(keep, want...)
	}); err != nil {
		return fmt.Errorf("device %s: %w", dev, err)
	}
	if storedHash, equal, err := c.scheduledMatch(s.fleet, dev, want); err == nil && equal {
		c.pushed[dev] = pushedDoc{stored: storedHash, want: wantHash}
	}
	return nil
}

// forgetStopped forgets the terminating pods whose device confirmed they
// stopped — it applied a desired generation without them and reports no
// such pod — and those of devices no longer in the fleet.
func (s *Scheduler) forgetStopped(devices []schedule.Device) (int, error) {
	known := map[string]bool{}
	for _, d := range devices {
		known[d.Name] = true
	}
	terminating, err := s.workloads.Terminating()
	if err != nil {
		return 0, err
	}
	var stopped []types.NamespacedName
	for _, p := range terminating {
		done := !known[p.Device]
		if !done {
			if done, err = s.fleet.Stopped(p.Device, p.Key.Namespace+"/"+p.Key.Name); err != nil {
				return 0, err
			}
		}
		if done {
			stopped = append(stopped, p.Key)
		}
	}
	if err := s.workloads.Forget(stopped); err != nil {
		return 0, err
	}
	return len(stopped), nil
}

// devicePod is a bound pod as its device gets it: its identity, labels,
// annotations and owner, and its spec without what only the scheduler
// reads. The device resolves priority itself: the hub's PriorityClass
// travels in the pod (priority.AnnotationHubClass), and a pod whose
// class is gone from the hub goes without one.
func devicePod(p *v1.Pod, class *schedulingv1.PriorityClass) *v1.Pod {
	out := &v1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, OwnerReferences: p.OwnerReferences,
		Annotations: maps.Clone(p.Annotations)}, Spec: *p.Spec.DeepCopy()}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[devicelink.AnnotationScheduled] = "true"
	s := &out.Spec
	s.Affinity, s.TopologySpreadConstraints, s.Tolerations, s.SchedulerName = nil, nil, nil, ""
	s.Priority, s.PreemptionPolicy = nil, nil
	switch {
	case class != nil:
		hc := priority.HubClass{Value: class.Value}
		if class.PreemptionPolicy != nil {
			hc.PreemptionPolicy = *class.PreemptionPolicy
		}
		raw, _ := json.Marshal(hc)
		out.Annotations[priority.AnnotationHubClass] = string(raw)
	case !strings.HasPrefix(s.PriorityClassName, "system-"):
		s.PriorityClassName = ""
	}
	return out
}

func scheduledPod(raw json.RawMessage) bool {
	var meta struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	json.Unmarshal(raw, &meta)
	return meta.Metadata.Annotations[devicelink.AnnotationScheduled] == "true"
}
