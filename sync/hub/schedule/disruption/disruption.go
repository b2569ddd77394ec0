// Package disruption is Kubernetes' disruption controller over the hub's
// pods: each PodDisruptionBudget's status (expectedPods, currentHealthy,
// desiredHealthy, disruptionsAllowed, disruptedPods and the
// DisruptionAllowed condition) from the pods it selects, as
// pkg/controller/disruption computes it; and Budgets, the eviction API's
// rules (pkg/registry/core/pod/storage/eviction.go) for spending those
// disruptions. It performs no I/O: a pod is healthy as its device
// reports it (workloads.Observed), on the hub's clock.
package disruption

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// DeletionTimeout is how long a pod the eviction API let go stays in a
// budget's disruptedPods (not counted healthy) before the controller
// takes it that the deletion will not come (the controller's constant).
const DeletionTimeout = 2 * time.Minute

// Kind is a budget's kind in events.
const Kind = "PodDisruptionBudget"

// Scale is a controller with a scale: the denominator of a percentage
// budget is the sum of the scales of its pods' controllers.
type Scale struct {
	// Kind is Deployment or StatefulSet.
	Kind, Namespace, Name string
	UID                   types.UID
	Replicas              int32
}

// Input is what one sync of the budgets reads.
type Input struct {
	Now  time.Time
	PDBs []*policyv1.PodDisruptionBudget
	// Pods are every pod the hub holds, with what their devices report.
	Pods []workloads.Pod
	// Scales are the workloads with a scale (Deployments, StatefulSets).
	Scales []Scale
}

// Result is the budgets with their new status, in input order, and the
// events the controller records.
type Result struct {
	PDBs   []*policyv1.PodDisruptionBudget
	Events []workloads.Event
}

// Sync computes every budget's status (trySync, or failSafe on an
// error). The budgets given are not changed: the result holds copies.
func Sync(in Input) Result {
	scales := map[string]Scale{}
	for _, s := range in.Scales {
		scales[s.Kind+"/"+s.Namespace+"/"+s.Name] = s
	}
	c := &controller{now: in.Now, scales: scales}
	res := Result{PDBs: make([]*policyv1.PodDisruptionBudget, len(in.PDBs))}
	idx := newPodIndex(in.Pods)
	for i, pdb := range in.PDBs {
		out := pdb.DeepCopy()
		if err := c.sync(out, idx); err != nil {
			c.failSafe(out, err)
		}
		res.PDBs[i] = out
	}
	res.Events = c.events
	return res
}

type controller struct {
	now    time.Time
	scales map[string]Scale
	events []workloads.Event
}

func (c *controller) event(pdb *policyv1.PodDisruptionBudget, typ, reason, message string) {
	c.events = append(c.events, workloads.Event{Kind: Kind, Namespace: pdb.Namespace, Name: pdb.Name, Type: typ, Reason: reason, Message: message})
}

// podIndex finds the pods of a namespace, and those with a label
// value, so that a fleet of budgets does not scan every pod for each.
type podIndex struct {
	pods        []workloads.Pod
	byNamespace map[string][]int32
	byLabel     map[string][]int32 // namespace/key=value
}

func newPodIndex(pods []workloads.Pod) *podIndex {
	x := &podIndex{pods: pods, byNamespace: map[string][]int32{}, byLabel: map[string][]int32{}}
	for i, p := range pods {
		ns := p.Pod.Namespace
		x.byNamespace[ns] = append(x.byNamespace[ns], int32(i))
		for k, v := range p.Pod.Labels {
			key := ns + "/" + k + "=" + v
			x.byLabel[key] = append(x.byLabel[key], int32(i))
		}
	}
	return x
}

// candidates are the pods a selector may match: those with the rarest
// of its matchLabels, else every pod of the namespace.
func (x *podIndex) candidates(namespace string, sel *metav1.LabelSelector) []int32 {
	if sel == nil || len(sel.MatchLabels) == 0 {
		return x.byNamespace[namespace]
	}
	var best []int32
	first := true
	for k, v := range sel.MatchLabels {
		if c := x.byLabel[namespace+"/"+k+"="+v]; first || len(c) < len(best) {
			best, first = c, false
		}
	}
	return best
}

// selected are the pods of the namespace the budget's selector matches.
func selected(pdb *policyv1.PodDisruptionBudget, idx *podIndex) ([]workloads.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil, err
	}
	var out []workloads.Pod
	for _, i := range idx.candidates(pdb.Namespace, pdb.Spec.Selector) {
		if p := idx.pods[i]; sel.Matches(labels.Set(p.Pod.Labels)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// sync is trySync: the pods, the expected count, the healthy ones, the
// status.
func (c *controller) sync(pdb *policyv1.PodDisruptionBudget, idx *podIndex) error {
	pods, err := selected(pdb, idx)
	if err != nil {
		c.event(pdb, v1.EventTypeWarning, "NoPods", fmt.Sprintf("Failed to get pods: %v", err))
		return err
	}
	if len(pods) == 0 {
		c.event(pdb, v1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expected, desired, unmanaged, err := c.expectedPodCount(pdb, pods)
	if err != nil {
		c.event(pdb, v1.EventTypeWarning, "CalculateExpectedPodCountFailed", fmt.Sprintf("Failed to calculate the number of expected pods: %v", err))
		return err
	}
	if len(unmanaged) > 0 {
		c.event(pdb, v1.EventTypeWarning, "UnmanagedPods", fmt.Sprintf("Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" "+
			"field of the PDB to an integer value.", pdb.Spec.Selector))
	}
	disrupted := c.disruptedPodMap(pods, pdb)
	healthy := c.countHealthy(pods, disrupted)
	c.updateStatus(pdb, healthy, desired, expected, disrupted)
	return nil
}

// expectedPodCount is getExpectedPodCount: maxUnavailable and a
// percentage minAvailable need the pods' controllers' scale (rounding
// up); an integer minAvailable takes the pods as they are.
func (c *controller) expectedPodCount(pdb *policyv1.PodDisruptionBudget, pods []workloads.Pod) (expected, desired int32, unmanaged []string, err error) {
	switch s := &pdb.Spec; {
	case s.MaxUnavailable != nil:
		if expected, unmanaged, err = c.expectedScale(pods); err != nil {
			return
		}
		var n int
		if n, err = intstr.GetScaledValueFromIntOrPercent(s.MaxUnavailable, int(expected), true); err != nil {
			return
		}
		desired = max(expected-int32(n), 0)
	case s.MinAvailable != nil && s.MinAvailable.Type == intstr.Int:
		desired, expected = s.MinAvailable.IntVal, int32(len(pods))
	case s.MinAvailable != nil:
		if expected, unmanaged, err = c.expectedScale(pods); err != nil {
			return
		}
		var n int
		if n, err = intstr.GetScaledValueFromIntOrPercent(s.MinAvailable, int(expected), true); err != nil {
			return
		}
		desired = int32(n)
	}
	return
}

// expectedScale is getExpectedScale: the sum of the scales of the pods'
// controllers, each counted once. A pod without a controller is
// unmanaged (left out, with an event); a pod whose controller has no
// scale — a DaemonSet's, or one whose workload is gone — is an error, as
// the controller finds no scale for it.
func (c *controller) expectedScale(pods []workloads.Pod) (int32, []string, error) {
	seen := map[types.UID]int32{}
	var unmanaged []string
	for _, p := range pods {
		ref := workloads.ControllerOf(p.Pod)
		if ref == nil {
			unmanaged = append(unmanaged, p.Pod.Name)
			continue
		}
		s, ok := c.scaleOf(p.Pod, ref)
		if !ok {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", p.Pod.Name)
		}
		seen[s.UID] = s.Replicas
	}
	var sum int32
	for _, n := range seen {
		sum += n
	}
	return sum, unmanaged, nil
}

// scaleOf finds a pod's controller with a scale: a ReplicaSet's
// Deployment (the ReplicaSet is <deployment>-<pod-template-hash>, its UID
// <deployment UID>-<hash>), or a StatefulSet.
func (c *controller) scaleOf(p *v1.Pod, ref *metav1.OwnerReference) (Scale, bool) {
	switch ref.Kind {
	case "ReplicaSet":
		hash := p.Labels[workloads.LabelPodTemplateHash]
		name, ok := strings.CutSuffix(ref.Name, "-"+hash)
		s, found := c.scales["Deployment/"+p.Namespace+"/"+name]
		if !ok || hash == "" || !found || (s.UID != "" && ref.UID != "" && ref.UID != types.UID(string(s.UID)+"-"+hash)) {
			return Scale{}, false
		}
		if s.UID == "" {
			s.UID = types.UID("Deployment/" + p.Namespace + "/" + name)
		}
		return s, true
	case "StatefulSet":
		s, found := c.scales["StatefulSet/"+p.Namespace+"/"+ref.Name]
		if !found || (s.UID != "" && ref.UID != "" && ref.UID != s.UID) {
			return Scale{}, false
		}
		if s.UID == "" {
			s.UID = types.UID("StatefulSet/" + p.Namespace + "/" + ref.Name)
		}
		return s, true
	}
	return Scale{}, false
}

// disruptedPodMap is buildDisruptedPodMap: the pods the eviction API let
// go that are not terminating yet, for DeletionTimeout.
func (c *controller) disruptedPodMap(pods []workloads.Pod, pdb *policyv1.PodDisruptionBudget) map[string]metav1.Time {
	out := map[string]metav1.Time{}
	if pdb.Status.DisruptedPods == nil {
		return out
	}
	for _, p := range pods {
		if p.Terminating {
			continue
		}
		t, found := pdb.Status.DisruptedPods[p.Pod.Name]
		if found && !t.Add(DeletionTimeout).Before(c.now) {
			out[p.Pod.Name] = t
		}
	}
	return out
}

// countHealthy is countHealthyPods: ready as the device reports, neither
// terminating nor let go by the eviction API.
func (c *controller) countHealthy(pods []workloads.Pod, disrupted map[string]metav1.Time) int32 {
	var n int32
	for _, p := range pods {
		if p.Terminating {
			continue
		}
		if t, found := disrupted[p.Pod.Name]; found && t.Add(DeletionTimeout).After(c.now) {
			continue
		}
		if Healthy(p) {
			n++
		}
	}
	return n
}

// Healthy is IsPodReady: the pod's device reports it Ready.
func Healthy(p workloads.Pod) bool { return p.Node != "" && p.Observed.Ready }

// updateStatus is updatePdbStatus: no disruption while nothing is
// expected (a budget whose first pods just came is safe).
func (c *controller) updateStatus(pdb *policyv1.PodDisruptionBudget, healthy, desired, expected int32, disrupted map[string]metav1.Time) {
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	if len(disrupted) == 0 {
		disrupted = nil
	}
	conditions := pdb.Status.Conditions
	pdb.Status = policyv1.PodDisruptionBudgetStatus{CurrentHealthy: healthy, DesiredHealthy: desired, ExpectedPods: expected,
		DisruptionsAllowed: allowed, DisruptedPods: disrupted, ObservedGeneration: pdb.Generation, Conditions: conditions}
	SetAllowedCondition(pdb, c.now)
}

// failSafe allows no disruption when the status cannot be computed: the
// condition says SyncFailed with the error; observedGeneration stays.
func (c *controller) failSafe(pdb *policyv1.PodDisruptionBudget, err error) {
	pdb.Status.DisruptionsAllowed = 0
	setCondition(pdb, metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.SyncFailedReason, Message: err.Error(), ObservedGeneration: pdb.Status.ObservedGeneration}, c.now)
}

// SetAllowedCondition is UpdateDisruptionAllowedCondition on the hub's
// clock: True (SufficientPods) while a disruption is allowed, else False
// (InsufficientPods).
func SetAllowedCondition(pdb *policyv1.PodDisruptionBudget, now time.Time) {
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.InsufficientPodsReason, ObservedGeneration: pdb.Status.ObservedGeneration}
	if pdb.Status.DisruptionsAllowed > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	setCondition(pdb, cond, now)
}

// setCondition sets a condition as meta.SetStatusCondition does, its
// transition time now when its status changes.
func setCondition(pdb *policyv1.PodDisruptionBudget, cond metav1.Condition, now time.Time) {
	cond.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(&pdb.Status.Conditions, cond)
}

// StatusEqual says whether two budget statuses are the same.
func StatusEqual(a, b *policyv1.PodDisruptionBudgetStatus) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}
