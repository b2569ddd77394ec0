package schedule

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

// defaultTolerationSeconds is what the DefaultTolerationSeconds admission
// plugin gives pods for not-ready and unreachable.
const defaultTolerationSeconds = 300

// admit does to a new pod what the API server's admission does before the
// scheduler sees it: Priority (priority and preemptionPolicy from the
// class, or the global default) and DefaultTolerationSeconds. A missing
// class is the API server's refusal, returned as an error.
func (s *state) admit(p *v1.Pod) error {
	class, err := s.classFor(p)
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
func (s *state) classFor(p *v1.Pod) (*schedulingv1.PriorityClass, error) {
	if name := p.Spec.PriorityClassName; name != "" {
		if class := s.classes[name]; class != nil {
			return class, nil
		}
		return nil, fmt.Errorf("pods %q is forbidden: no PriorityClass with name %s was found", p.Name, name)
	}
	return s.globalDefault(), nil
}

// resolvedPriority is a stored pod's priority: spec.priority once
// admitted, else its class's value (a missing class leaves it unschedulable).
func (s *state) resolvedPriority(p *v1.Pod) (int32, string) {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority, ""
	}
	class, err := s.classFor(p)
	if err != nil {
		return 0, err.Error()
	}
	if class == nil {
		return 0, ""
	}
	return class.Value, ""
}

// preemptsOthers is false for preemptionPolicy Never, on the pod or its class.
func (s *state) preemptsOthers(p *v1.Pod) bool {
	if pp := p.Spec.PreemptionPolicy; pp != nil {
		return *pp != v1.PreemptNever
	}
	if class, err := s.classFor(p); err == nil && class != nil && class.PreemptionPolicy != nil {
		return *class.PreemptionPolicy != v1.PreemptNever
	}
	return true
}

// globalDefault is the globalDefault class with the lowest value (the
// Priority admission plugin's choice when several claim it), or nil.
func (s *state) globalDefault() *schedulingv1.PriorityClass {
	var best *schedulingv1.PriorityClass
	for _, pc := range s.classes {
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
