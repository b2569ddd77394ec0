// Package admission decides whether a pod may start on the device: whether
// its requests fit in what is allocatable, which lower-priority pods to
// preempt when they do not, and what to refuse while the node is under
// pressure. It is pure: the caller supplies the pods and the node.
package admission

import (
	"fmt"
	"math"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/pod/vocab"
)

// Pod is a pod as admission sees it.
type Pod struct {
	UID      types.UID
	Name     string
	Requests v1.ResourceList
	Priority int32
	QoS      v1.PodQOSClass
	// Tolerations matter for the memory-pressure taint.
	Tolerations []v1.Toleration
	// PreemptNever forbids this pod from preempting others.
	PreemptNever bool
}

// FromPod builds the admission view of a pod whose priority is resolved.
func FromPod(p *v1.Pod) Pod {
	return Pod{
		UID: p.UID, Name: p.Namespace + "/" + p.Name, Requests: resources.PodRequests(p), Priority: vocab.Priority(p),
		QoS: vocab.QOSClass(p), Tolerations: p.Spec.Tolerations,
		PreemptNever: p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy == v1.PreemptNever,
	}
}

// Critical reports whether the pod is always admitted and never evicted.
func (p Pod) Critical() bool { return priority.IsCritical(p.Priority) }

// Node is the device as admission sees it.
type Node struct {
	Allocatable v1.ResourceList
	// Pressure holds the node conditions currently true
	// (MemoryPressure, DiskPressure, PIDPressure).
	Pressure map[v1.NodeConditionType]bool
}

// Decision is the outcome for one pod.
type Decision struct {
	Admit   bool
	Reason  string // OutOfcpu, OutOfmemory, OutOfpods, Evicted (pressure), ...
	Message string
	// Victims must be preempted (terminated, reason Preempted) before the
	// pod starts.
	Victims []types.UID
	// Resource is the first resource the pod lacked, which the victims
	// free (kubelet_preemptions' preemption_signal).
	Resource v1.ResourceName
}

// checked are the resources admission counts, in the order reasons name
// them.
var checked = []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourcePods}

// Admit decides whether candidate may join the running pods.
func Admit(candidate Pod, running []Pod, node Node) Decision {
	if d, ok := pressureAdmit(candidate, node); !ok {
		return d
	}
	short := shortfall(candidate, running, node.Allocatable)
	if len(short) == 0 {
		return Decision{Admit: true}
	}
	reject := Decision{Reason: "OutOf" + string(short[0].name), Message: short.message()}
	if candidate.PreemptNever {
		reject.Message += "; preemptionPolicy Never forbids preempting other pods"
		return reject
	}
	var eligible []Pod
	for _, p := range running {
		if p.Priority < candidate.Priority && !p.Critical() {
			eligible = append(eligible, p)
		}
	}
	victims, ok := preempt(eligible, short)
	if !ok {
		reject.Message += "; no lower-priority pods free enough"
		return reject
	}
	d := Decision{Admit: true, Reason: "Preempting", Message: "preempting " + names(victims), Resource: short[0].name}
	for _, v := range victims {
		d.Victims = append(d.Victims, v.UID)
	}
	return d
}

// pressureAdmit applies the kubelet's eviction admit rules: critical pods
// always pass; under memory pressure alone only BestEffort pods are refused
// (unless they tolerate the taint); any other pressure refuses every
// non-critical pod.
func pressureAdmit(p Pod, node Node) (Decision, bool) {
	var conds []string
	for c, on := range node.Pressure {
		if on {
			conds = append(conds, string(c))
		}
	}
	if len(conds) == 0 || p.Critical() {
		return Decision{}, true
	}
	sort.Strings(conds)
	onlyMemory := len(conds) == 1 && conds[0] == string(v1.NodeMemoryPressure)
	if onlyMemory && (p.QoS != v1.PodQOSBestEffort || toleratesMemoryPressure(p.Tolerations)) {
		return Decision{}, true
	}
	return Decision{Reason: "Evicted", Message: fmt.Sprintf("The node had condition: [%s].", strings.Join(conds, ", "))}, false
}

// toleratesMemoryPressure reports whether a toleration matches the
// node.kubernetes.io/memory-pressure:NoSchedule taint (no value).
func toleratesMemoryPressure(ts []v1.Toleration) bool {
	for _, t := range ts {
		keyOK := t.Key == v1.TaintNodeMemoryPressure || (t.Key == "" && t.Operator == v1.TolerationOpExists)
		effectOK := t.Effect == "" || t.Effect == v1.TaintEffectNoSchedule
		valueOK := t.Operator == v1.TolerationOpExists || t.Value == ""
		if keyOK && effectOK && valueOK {
			return true
		}
	}
	return false
}

// need is how much of one resource is missing.
type need struct {
	name     v1.ResourceName
	quantity int64 // milli-units for cpu, units otherwise
}

type needs []need

func (n needs) message() string {
	parts := make([]string, len(n))
	for i, x := range n {
		parts[i] = fmt.Sprintf("Insufficient %s", x.name)
	}
	return strings.Join(parts, ", ")
}

func amount(list v1.ResourceList, name v1.ResourceName) int64 {
	if name == v1.ResourcePods {
		return 1
	}
	q, ok := list[name]
	if !ok {
		return 0
	}
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

func capacity(list v1.ResourceList, name v1.ResourceName) (int64, bool) {
	q, ok := list[name]
	if !ok {
		return 0, false
	}
	if name == v1.ResourceCPU {
		return q.MilliValue(), true
	}
	return q.Value(), true
}

// shortfall is what the running pods and the candidate need beyond what is
// allocatable, per resource the candidate asks for.
func shortfall(candidate Pod, running []Pod, allocatable v1.ResourceList) needs {
	var out needs
	for _, name := range checked {
		want := amount(candidate.Requests, name)
		if want == 0 {
			continue
		}
		limit, ok := capacity(allocatable, name)
		if !ok {
			continue // not accounted on this device
		}
		used := int64(0)
		for _, p := range running {
			used += amount(p.Requests, name)
		}
		if over := used + want - limit; over > 0 {
			out = append(out, need{name, over})
		}
	}
	return out
}

// preempt picks victims as the kubelet's critical-pod preemption does:
// Guaranteed pods only as far as BestEffort and Burstable ones cannot
// cover, then Burstable as far as BestEffort cannot, then BestEffort; in
// each class the pod closest to the remaining need first.
func preempt(eligible []Pod, short needs) ([]Pod, bool) {
	byClass := map[v1.PodQOSClass][]Pod{}
	for _, p := range eligible {
		byClass[p.QoS] = append(byClass[p.QoS], p)
	}
	be, bu, gu := byClass[v1.PodQOSBestEffort], byClass[v1.PodQOSBurstable], byClass[v1.PodQOSGuaranteed]
	guaranteed, ok := byDistance(gu, short.minus(append(append([]Pod{}, be...), bu...)...))
	if !ok {
		return nil, false
	}
	burstable, ok := byDistance(bu, short.minus(be...).minus(guaranteed...))
	if !ok {
		return nil, false
	}
	besteffort, ok := byDistance(be, short.minus(burstable...).minus(guaranteed...))
	if !ok {
		return nil, false
	}
	return append(append(besteffort, burstable...), guaranteed...), true
}

// minus is what remains needed if the pods were gone.
func (n needs) minus(pods ...Pod) needs {
	var out needs
	for _, x := range n {
		left := x.quantity
		for _, p := range pods {
			left -= amount(p.Requests, x.name)
		}
		if left > 0 {
			out = append(out, need{x.name, left})
		}
	}
	return out
}

// distance is how far a pod's requests are from covering the need, each
// resource weighted by the fraction left uncovered.
func (n needs) distance(p Pod) float64 {
	d := 0.0
	for _, x := range n {
		if left := float64(x.quantity - amount(p.Requests, x.name)); left > 0 {
			d += math.Pow(left/float64(x.quantity), 2)
		}
	}
	return d
}

func byDistance(pool []Pod, short needs) ([]Pod, bool) {
	pool = append([]Pod(nil), pool...)
	var picked []Pod
	for len(short) > 0 {
		if len(pool) == 0 {
			return nil, false
		}
		best := 0
		for i := 1; i < len(pool); i++ {
			di, db := short.distance(pool[i]), short.distance(pool[best])
			switch {
			case di < db:
				best = i
			case di == db && pool[i].Priority < pool[best].Priority:
				best = i
			case di == db && pool[i].Priority == pool[best].Priority && smaller(pool[i], pool[best]):
				best = i
			}
		}
		picked = append(picked, pool[best])
		short = short.minus(pool[best])
		pool = append(pool[:best], pool[best+1:]...)
	}
	return picked, true
}

// smaller compares requests memory first, then CPU, as the kubelet does.
func smaller(a, b Pod) bool {
	am, bm := amount(a.Requests, v1.ResourceMemory), amount(b.Requests, v1.ResourceMemory)
	if am != bm {
		return am < bm
	}
	return amount(a.Requests, v1.ResourceCPU) < amount(b.Requests, v1.ResourceCPU)
}

func names(pods []Pod) string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return strings.Join(out, ", ")
}
