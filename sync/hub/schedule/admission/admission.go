// Package admission does to a pod what the API server's admission does
// before the scheduler sees it: the Priority plugin (priority and
// preemptionPolicy from the pod's PriorityClass or the global default)
// and DefaultTolerationSeconds. It holds the pass's PriorityClasses.
package admission

import (
	"cmp"
	"fmt"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// builtinPriorityClasses exist in every cluster (scheduling.k8s.io/v1
// SystemPriorityClasses).
var builtinPriorityClasses = []*schedulingv1.PriorityClass{
	{ObjectMeta: metav1.ObjectMeta{Name: "system-node-critical"}, Value: 2000001000},
	{ObjectMeta: metav1.ObjectMeta{Name: "system-cluster-critical"}, Value: 2000000000},
}

// Admission is the Priority and DefaultTolerationSeconds admission
// plugins over one set of PriorityClasses.
type Admission struct {
	classes map[string]*schedulingv1.PriorityClass
}

// New holds the built-in classes and the given ones (which win on a name).
func New(classes []*schedulingv1.PriorityClass) *Admission {
	a := &Admission{classes: make(map[string]*schedulingv1.PriorityClass, len(builtinPriorityClasses)+len(classes))}
	for _, pc := range builtinPriorityClasses {
		a.classes[pc.Name] = pc
	}
	for _, pc := range classes {
		a.classes[pc.Name] = pc
	}
	return a
}

// defaultTolerationSeconds is what the DefaultTolerationSeconds admission
// plugin gives pods for not-ready and unreachable.
const defaultTolerationSeconds = 300

// Admit does to a new pod what the API server's admission does before the
// scheduler sees it: Priority (priority and preemptionPolicy from the
// class, or the global default) and DefaultTolerationSeconds. A missing
// class is the API server's refusal, returned as an error.
func (a *Admission) Admit(p *v1.Pod) error {
	class, err := a.classFor(p)
	if err != nil {
		return err
	}
	value, policy := ClassPriority(class)
	p.Spec.Priority = &value
	if p.Spec.PreemptionPolicy == nil {
		p.Spec.PreemptionPolicy = &policy
	}
	addDefaultTolerations(p)
	return nil
}

// ClassPriority is the priority and preemption policy the Priority
// admission plugin gives a pod of class: nil (no class named and no
// global default) is 0 and PreemptLowerPriority.
func ClassPriority(class *schedulingv1.PriorityClass) (int32, v1.PreemptionPolicy) {
	if class == nil {
		return 0, v1.PreemptLowerPriority
	}
	if class.PreemptionPolicy == nil {
		return class.Value, v1.PreemptLowerPriority
	}
	return class.Value, *class.PreemptionPolicy
}

// classFor is the pod's PriorityClass: the one it names, or the global
// default (nil when there is none).
func (a *Admission) classFor(p *v1.Pod) (*schedulingv1.PriorityClass, error) {
	if name := p.Spec.PriorityClassName; name != "" {
		if class := a.classes[name]; class != nil {
			return class, nil
		}
		return nil, fmt.Errorf("pods %q is forbidden: no PriorityClass with name %s was found", p.Name, name)
	}
	return a.globalDefault(), nil
}

// Priority is a stored pod's priority: spec.priority once
// admitted, else its class's value; a missing class leaves it
// unschedulable, with the API server's refusal as the reason.
func (a *Admission) Priority(p *v1.Pod) (int32, string) {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority, ""
	}
	class, err := a.classFor(p)
	if err != nil {
		return 0, err.Error()
	}
	if class == nil {
		return 0, ""
	}
	return class.Value, ""
}

// PreemptsOthers is false for preemptionPolicy Never, on the pod or its class.
func (a *Admission) PreemptsOthers(p *v1.Pod) bool {
	if pp := p.Spec.PreemptionPolicy; pp != nil {
		return *pp != v1.PreemptNever
	}
	if class, err := a.classFor(p); err == nil && class != nil && class.PreemptionPolicy != nil {
		return *class.PreemptionPolicy != v1.PreemptNever
	}
	return true
}

// globalDefault is the globalDefault class with the lowest value (the
// Priority admission plugin's choice when several claim it), or nil.
func (a *Admission) globalDefault() *schedulingv1.PriorityClass {
	var best *schedulingv1.PriorityClass
	for _, pc := range a.classes {
		if !pc.GlobalDefault {
			continue
		}
		if best == nil || pc.Value < best.Value || (pc.Value == best.Value && cmp.Less(pc.Name, best.Name)) {
			best = pc
		}
	}
	return best
}

// addDefaultTolerations adds not-ready and unreachable NoExecute
// tolerations for 300 s unless the pod already tolerates them, as the
// DefaultTolerationSeconds admission plugin does.
func addDefaultTolerations(p *v1.Pod) {
	var notReady, unreachable bool
	for _, t := range p.Spec.Tolerations {
		if t.Effect != v1.TaintEffectNoExecute && t.Effect != "" {
			continue
		}
		if t.Key == v1.TaintNodeNotReady || t.Key == "" {
			notReady = true
		}
		if t.Key == v1.TaintNodeUnreachable || t.Key == "" {
			unreachable = true
		}
	}
	secs := int64(defaultTolerationSeconds)
	if !notReady {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: v1.TaintNodeNotReady,
			Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &secs})
	}
	if !unreachable {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: v1.TaintNodeUnreachable,
			Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &secs})
	}
}
