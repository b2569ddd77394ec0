// Package schedule is the hub's scheduler: a pure function from the fleet
// (devices as nodes), the workloads (DaemonSets, Deployments, bare Pods),
// the pods already placed, the PriorityClasses and the time, to a plan —
// pods to create, placements, pending reasons, preemptions and deletions —
// with the Kubernetes scheduler's and controllers' semantics. It performs no
// I/O; the hub stores the plan and turns it into desired documents.
//
// Every decision is deterministic: devices are visited in name order, ties
// go to the first device by name, and pods are queued by priority, then
// creation time, then namespace/name.
package schedule

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule/admission"
	"github.com/podvisor/podvisor/sync/hub/schedule/fleet"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// Device is a device as the scheduler sees it: a node (fleet.Device).
type Device = fleet.Device

// Input is everything one scheduling pass sees.
type Input struct {
	Now         time.Time
	Devices     []Device
	DaemonSets  []*appsv1.DaemonSet
	Deployments []*appsv1.Deployment
	// Pods are all pods the hub holds: bare pods and the pods workloads
	// made earlier, bound (spec.nodeName set), pending, or terminating
	// (deletionTimestamp set: they hold their resources until gone).
	Pods            []*v1.Pod
	PriorityClasses []*schedulingv1.PriorityClass
	// PDBs make preemption prefer victims whose budget allows a
	// disruption; status.disruptionsAllowed is taken as given.
	PDBs []*policyv1.PodDisruptionBudget
	// Observed is what the devices report of the bound pods, by pod: a
	// pod is ready or available only as its device says (a pod merely
	// placed is neither). A pod absent here has not been reported.
	Observed map[types.NamespacedName]workloads.Observed
	// MaxPods bounds the pods the hub holds (0: no bound). A controller's
	// pod past it is refused as a pod quota refuses it: a FailedCreate
	// event, once per workload and pass. A DaemonSet makes a pod per
	// device, so no check at apply time can bound what it asks for.
	MaxPods int
}

// Plan is what the hub must do after one pass.
type Plan struct {
	// Create are the pods workloads need that do not exist yet, as their
	// controller makes them (unbound; Bindings says where they go).
	Create []*v1.Pod
	// Bindings place pods (new or pending before) on devices.
	Bindings []Binding
	// Pending are the pods left unplaced, with the scheduler's reason.
	Pending []Pending
	// Preemptions say which pods make room for which pod.
	Preemptions []Preemption
	// Deletions are pods to terminate gracefully, with the reason.
	Deletions []Deletion
	// Events are what a workload's controller reports (FailedCreate).
	Events []Event
}

// Event is an event on an object, as its controller records it.
type Event = workloads.Event

// Binding places a pod on a device (spec.nodeName).
type Binding struct {
	Pod    types.NamespacedName
	Device string
}

// Pending is a pod that could not be placed in this pass.
type Pending struct {
	Pod types.NamespacedName
	// Message is the PodScheduled=False condition's message, in the
	// scheduler's words ("0/3 devices are available: ...").
	Message string
	// NominatedNodeName is the device preemption makes room on.
	NominatedNodeName string
}

// Preemption is a pending pod for which lower-priority pods are deleted.
type Preemption struct {
	Pod     types.NamespacedName
	Device  string
	Victims []types.NamespacedName
}

// Deletion reasons.
const (
	// ReasonPreempted: a higher-priority pod needs the room.
	ReasonPreempted = "PreemptionByScheduler"
	// The controllers' reasons (package workloads).
	ReasonNodeLost     = workloads.ReasonNodeLost
	ReasonTaint        = workloads.ReasonTaint
	ReasonScaledDown   = workloads.ReasonScaledDown
	ReasonOutdated     = workloads.ReasonOutdated
	ReasonNotEligible  = workloads.ReasonNotEligible
	ReasonOwnerDeleted = workloads.ReasonOwnerDeleted
)

// Deletion is a pod to terminate gracefully, or to forget at once.
type Deletion struct {
	Pod     types.NamespacedName
	Reason  string
	Message string
	// Force forgets the pod at once, as a deletion with grace period 0:
	// its device is known not to run it (fenced).
	Force bool
}

// ReasonPodGC is the pod garbage collector's reason for a pod it
// force-deletes: here, a pod of a fenced device.
const ReasonPodGC = "DeletionByPodGC"

// podInfo is a pod with what scheduling needs precomputed.
type podInfo struct {
	pod      *v1.Pod
	key      types.NamespacedName
	req      fleet.Resources
	priority int32
	// created orders the queue (creation time, then arrival).
	created time.Time
	// terminating pods hold resources but count for no spread or replica.
	terminating bool
	node        *nodeInfo
	// unschedulable holds a priority admission error, if any.
	unschedulable string
}

// nodeInfo is a device with the pods on it.
type nodeInfo struct {
	idx     int // position in state.nodes
	name    string
	node    *v1.Node
	alloc   fleet.Resources
	maxPods int64
	used    fleet.Resources
	pods    []*podInfo
	// nonZeroCPU and nonZeroMem are the pods' requests for scoring.
	nonZeroCPU, nonZeroMem int64
}

// state is one pass.
type state struct {
	now       time.Time
	nodes     []*nodeInfo
	byName    map[string]*nodeInfo
	pods      map[types.NamespacedName]*podInfo
	order     []*podInfo // every pod in input order, then created ones
	nominated map[string][]*podInfo
	admission *admission.Admission
	pdbs      []*policyv1.PodDisruptionBudget
	// spreadCache holds one spread filter per workload shape.
	spreadCache map[string]*spreadFilter
	// feasible and scores are scheduleOne's scratch lists.
	feasible []*nodeInfo
	scores   [4][]int64
	// matchCache counts each selector's pods per node.
	matchCache map[string]*matchCounts
	// owned indexes the pods by their workload (workloads.Index), in
	// order's order: each controller reads its own pods, not every pod.
	owned map[string][]*podInfo
	// owners finds a pod's live workload (index, the default spread).
	owners *workloads.Owners
	// observed are the devices' reports of the bound pods.
	observed map[types.NamespacedName]workloads.Observed
	plan     Plan
}

// Schedule runs one pass: taint-based eviction, the DaemonSet and
// Deployment controllers, then the scheduler over every pod without a
// device, highest priority first.
func Schedule(in Input) Plan {
	s := newState(in)
	s.forceFenced(in)
	workloads.Sync(&cluster{s: s}, workloads.Pass{Now: in.Now, DaemonSets: in.DaemonSets, Deployments: in.Deployments,
		Owners: s.owners, MaxPods: in.MaxPods})
	queue := s.queue()
	for _, p := range queue {
		s.scheduleOne(p)
	}
	return s.plan
}

func newState(in Input) *state {
	s := &state{
		now:         in.Now,
		byName:      map[string]*nodeInfo{},
		pods:        map[types.NamespacedName]*podInfo{},
		nominated:   map[string][]*podInfo{},
		admission:   admission.New(in.PriorityClasses),
		spreadCache: map[string]*spreadFilter{},
		matchCache:  map[string]*matchCounts{},
		pdbs:        in.PDBs,
		observed:    in.Observed,
		owned:       map[string][]*podInfo{},
		// Pods are filed under their workload as they are read (index).
		owners: workloads.NewOwners(in.DaemonSets, in.Deployments),
	}
	devs := slices.Clone(in.Devices)
	slices.SortFunc(devs, func(a, b Device) int { return cmp.Compare(a.Name, b.Name) })
	for i := range devs {
		d := &devs[i]
		if _, dup := s.byName[d.Name]; dup {
			continue
		}
		n := &nodeInfo{idx: len(s.nodes), name: d.Name, node: d.Node(), alloc: fleet.ToResources(d.Allocatable), maxPods: d.MaxPods()}
		s.nodes = append(s.nodes, n)
		s.byName[d.Name] = n
	}
	for _, p := range in.Pods {
		pi := &podInfo{pod: p, key: keyOf(p), req: fleet.PodRequests(p), created: p.CreationTimestamp.Time,
			terminating: p.DeletionTimestamp != nil}
		if _, dup := s.pods[pi.key]; dup {
			continue
		}
		pi.priority, pi.unschedulable = s.admission.Priority(p)
		s.pods[pi.key] = pi
		s.order = append(s.order, pi)
		s.index(pi)
		if n := s.byName[p.Spec.NodeName]; n != nil {
			s.attach(pi, n)
		} else if nn := p.Status.NominatedNodeName; p.Spec.NodeName == "" && nn != "" && !pi.terminating {
			s.nominated[nn] = append(s.nominated[nn], pi)
		}
	}
	return s
}

func keyOf(p *v1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// attach puts a pod on a node's books.
func (s *state) attach(p *podInfo, n *nodeInfo) {
	p.node = n
	n.pods = append(n.pods, p)
	n.used.Add(p.req, 1)
	s.track(n, p, 1)
	cpu, mem := p.req.NonZero()
	n.nonZeroCPU += cpu
	n.nonZeroMem += mem
}

// detach takes a pod off its node's books (preemption's dry run).
func (s *state) detach(p *podInfo) {
	n := p.node
	s.track(n, p, -1)
	for i, q := range n.pods {
		if q == p {
			n.pods = slices.Delete(n.pods, i, i+1)
			break
		}
	}
	n.used.Add(p.req, -1)
	cpu, mem := p.req.NonZero()
	n.nonZeroCPU -= cpu
	n.nonZeroMem -= mem
	p.node = nil
}

// forceFenced force-deletes every pod bound to a fenced device the hub
// does not hear from, before the controllers run, so that they replace
// them in this pass: the pod garbage collector force-deletes (grace
// period 0) the pods of a node tainted out-of-service that is not Ready.
// A fenced device still heard from has its pods evicted by the taint and
// confirms them stopped, as any device does.
func (s *state) forceFenced(in Input) {
	lost := map[string]bool{}
	for _, d := range in.Devices {
		if d.Fenced && !d.UnreachableSince.IsZero() {
			lost[d.Name] = true
		}
	}
	if len(lost) == 0 {
		return
	}
	for _, p := range s.order {
		dev := p.pod.Spec.NodeName
		if !lost[dev] {
			continue
		}
		msg := fmt.Sprintf("PodGC: device %s is fenced and unreachable", dev)
		if p.terminating {
			// Already deleted gracefully: waited for no longer.
			s.plan.Deletions = slices.DeleteFunc(s.plan.Deletions, func(d Deletion) bool { return d.Pod == p.key })
			s.plan.Deletions = append(s.plan.Deletions, Deletion{Pod: p.key, Reason: ReasonPodGC, Message: msg, Force: true})
			continue
		}
		s.markDeleted(p, ReasonPodGC, msg)
		s.plan.Deletions[len(s.plan.Deletions)-1].Force = true
	}
}

// markDeleted terminates a pod: it keeps its resources until the device
// confirms it stopped, but no longer counts for spreads or replicas.
func (s *state) markDeleted(p *podInfo, reason, message string) {
	if p.terminating {
		return
	}
	if p.node != nil {
		s.track(p.node, p, -1)
	}
	p.terminating = true
	s.plan.Deletions = append(s.plan.Deletions, Deletion{Pod: p.key, Reason: reason, Message: message})
	switch ref := workloads.ControllerOf(p.pod); {
	case reason == ReasonPreempted:
		s.event("Pod", p.key, v1.EventTypeNormal, "Preempted", message)
	case reason == ReasonNodeLost || reason == ReasonTaint:
		s.event("Pod", p.key, v1.EventTypeNormal, "TaintManagerEviction", "Marking for deletion Pod "+p.key.String())
	case ref != nil && ref.Kind == "DaemonSet":
		s.event("DaemonSet", types.NamespacedName{Namespace: p.key.Namespace, Name: ref.Name}, v1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.key.Name)
	}
	if p.node == nil {
		s.unnominate(p)
	}
}

// track keeps the shared spread filters' counts in step with a pod
// arriving on (1) or leaving (-1) a node.
func (s *state) track(n *nodeInfo, p *podInfo, sign int) {
	for _, f := range s.spreadCache {
		f.add(n, []*podInfo{p}, sign)
	}
	for _, mc := range s.matchCache {
		if counts(p, mc.sel, mc.namespace) {
			mc.perNode[n.idx] += sign
		}
	}
}

func (s *state) unnominate(p *podInfo) {
	for nn, list := range s.nominated {
		for i, q := range list {
			if q == p {
				s.nominated[nn] = slices.Delete(list, i, i+1)
				return
			}
		}
	}
}

// addCreated registers a pod a controller made in this pass.
func (s *state) addCreated(p *v1.Pod) *podInfo {
	pi := &podInfo{pod: p, key: keyOf(p), req: fleet.PodRequests(p), created: s.now}
	pi.priority, pi.unschedulable = s.admission.Priority(p)
	s.pods[pi.key] = pi
	s.order = append(s.order, pi)
	s.index(pi)
	s.plan.Create = append(s.plan.Create, p)
	if ref := workloads.ControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		s.event("DaemonSet", types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, v1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+p.Name)
	}
	return pi
}

// event records an event on an object, as its controller would.
func (s *state) event(kind string, obj types.NamespacedName, typ, reason, message string) {
	s.plan.Events = append(s.plan.Events, Event{Kind: kind, Namespace: obj.Namespace, Name: obj.Name, Type: typ, Reason: reason, Message: message})
}

// queue is every pod without a device, in the scheduler's queue order:
// higher priority first, then earlier creation (PrioritySort), then name.
func (s *state) queue() []*podInfo {
	var q []*podInfo
	for _, p := range s.order {
		if p.node == nil && !p.terminating && p.pod.Spec.NodeName == "" {
			q = append(q, p)
		}
	}
	slices.SortStableFunc(q, func(a, b *podInfo) int {
		if c := cmp.Compare(b.priority, a.priority); c != 0 {
			return c
		}
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.key.Namespace, b.key.Namespace), cmp.Compare(a.key.Name, b.key.Name))
	})
	return q
}
